""":class:`AggregatorFunction`: the SAM template's function, stream subscription, role, queue,
log group and alarms as one CDK construct.

Everything that follows from the rules comes from the functions that render the SAM template's
regions (:func:`aggregator.cli.template.render_regions`): the stream's ``FilterCriteria``
(:func:`aggregator.deploy.filters.filter_criteria`), the ``dynamodb:LeadingKeys`` conditions
of the role's item grants (the role's statements: :mod:`aggregator.cdk.policies`), and the
created table's keys and indexes (:func:`aggregator.dynamodb.table.table_definition`). The
function's code is the artifact of ``aggregator build``
(:func:`aggregator.cli.project.build.build_function`), built on this machine when the app is
synthesized (CDK local bundling, no Docker) or given prebuilt (:mod:`aggregator.cdk.code`).

Sources: Lambda Developer Guide, "Lambda parameters for Amazon DynamoDB event source mappings"
(batch size, bisect, retries, maximum record age, parallelization, tumbling windows, on-failure
destinations), "Configuring partial batch response with DynamoDB and Lambda", "Lambda event
filtering", "Types of metrics for Lambda functions" (``IteratorAge``); Amazon SQS Developer
Guide, "Available CloudWatch metrics for Amazon SQS".
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aws_cdk import (
    Aws,
    CfnCondition,
    CfnResource,
    Duration,
    Fn,
    RemovalPolicy,
    Token,
)
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from jsii.errors import JSIIError

from aggregator.cdk.backfill import BACKFILL_MEMORY_MB, BackfillOnAws
from aggregator.cdk.code import LocalBuild, function_code
from aggregator.cdk.policies import role_statements, target_policies
from aggregator.cli.project.build import (
    DEFINITIONS_DIR,
    FunctionRuntime,
    rule_files,
)
from aggregator.cli.template import render_regions
from aggregator.core.exceptions import ConfigError
from aggregator.core.layout import TableLayout
from aggregator.core.rules import RuleSet, load_rules
from aggregator.deploy.backfill_roles import reads_collection_index
from aggregator.dynamodb.modes import WRITE_MODES
from aggregator.dynamodb.table import table_definition
from aggregator.dynamodb.tablecheck import REGION_PATTERN, VIEW_TYPE, key_schema_problems

__all__ = ["AggregatorFunction", "RulePaths"]

RulePaths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
"""Rule files or directories (each directory's top-level ``*.yaml``/``*.yml``), as ``-d``."""

# The function and its stream subscription as template.yaml declares them
# (tests/unit/cdk/test_cdk.py compares the two).
HANDLER = "aggregator.handler.handler"
BACKFILL_HANDLER = "aggregator.backfill_handler.handler"
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
MEMORY_MB = 1769
TIMEOUT_SECONDS = 60
MAX_BATCHING_WINDOW_SECONDS = 1
RETRY_ATTEMPTS = 10
MAX_RECORD_AGE_SECONDS = 86_400
CHECKPOINT_RETENTION_SECONDS = MAX_RECORD_AGE_SECONDS + 3_600
"""Checkpoints older than the oldest record Lambda still delivers (plus a margin) protect
nothing (``AGGREGATOR_CHECKPOINT_RETENTION_SECONDS``)."""
QUEUE_RETENTION = Duration.days(14)
METRICS_NAMESPACE = "DdbAggregator"
"""``POWERTOOLS_METRICS_NAMESPACE``: the namespace of the handler's EMF metrics."""

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}


class AggregatorFunction(Construct):
    """The aggregator's Lambda function on a table's stream, as ``template.yaml`` deploys it.

    Creates, in this construct's scope:

    - ``Function``: handler ``aggregator.handler.handler``, Python 3.12 on arm64, 1,769 MB (one
      vCPU: a shard is CPU-bound, docs "Keeping up with a shard"), 60 s, the artifact of
      ``aggregator build`` (rules in ``definitions/``);
    - ``Stream``: the event source mapping from the table's stream, ``TRIM_HORIZON``, with the
      rules' ``FilterCriteria``, ``ReportBatchItemFailures``, ``BisectBatchOnFunctionError``, 10
      retries, a 24 h maximum record age, ``ParallelizationFactor`` 1, tumbling windows, and the
      queue as on-failure destination;
    - ``Role``: the function's role with exactly the SAM template's statements (stream reads;
      ``DescribeTable``; item grants under the reserved partitions only, conditioned on
      ``dynamodb:LeadingKeys``; ``sqs:SendMessage`` to the queue; logs to its log group; X-Ray
      writes with ``tracing``). The function is given an immutable view of it
      (``iam.Role.without_policy_updates``), so grants made through the function
      (``grant_principal``, event sources, destinations) add nothing: add statements to
      :attr:`role` itself deliberately;
    - ``Queue``: the on-failure SQS queue (SQS-managed encryption, 14 days' retention,
      retained when the stack is deleted);
    - ``LogGroup``: the function's log group (``log_retention``, deleted with the stack);
    - with ``alarms``, ``IteratorAgeAlarm``, ``DeadLettersAlarm`` and ``FailureQueueAlarm``;
    - with ``backfill``, ``Backfill``: the backfill on AWS (the backfill function, its role and
      log group, the state machine, its role and map-run policy);
    - with ``home_region``, ``CountHere``: a ``CfnCondition`` (the stack's ``AWS::Region``
      equals ``home_region``) on ``Stream``, ``IteratorAgeAlarm`` and the backfill's resources,
      as the SAM template's ``HomeRegion`` does.

    Parameters
    ----------
    scope, construct_id
        As for any construct.
    table
        The table whose stream feeds the function and that holds the aggregates: an
        ``aws_dynamodb.ITable`` or ``ITableV2`` with a stream ARN (a table created with a
        ``NEW_AND_OLD_IMAGES`` stream, :meth:`table_for_rules`, or one imported with
        ``Table.from_table_attributes(..., table_arn=..., table_stream_arn=...)``). For an
        imported table the role's table ARN is taken from the stream ARN
        (``arn:...:table/NAME/stream/LABEL``), as the SAM template does: a stream of another
        table fails closed (AccessDenied).
    rules
        Rule files or directories (relative paths from the working directory of the CDK app):
        shipped in the artifact's ``definitions/`` and rendered into the filters and the role.
    artifact
        A directory built by ``aggregator build`` for these rules (``--output DIR``). ``None``
        (the default) builds it when the app is synthesized, on this machine: ``pip`` installs
        the dependencies for Python 3.12 on arm64 at the versions installed here (the package
        registry must be reachable). Given, its ``definitions/`` must hold exactly the rule
        files of ``rules`` (same names and contents).
    boto3
        ``"bundle"`` (the default) ships boto3 in the built artifact; ``"runtime"`` leaves it to
        the Lambda runtime's own copy (``aggregator build --boto3 runtime``). Not used with
        ``artifact``.
    mode
        The write mode (``AGGREGATOR_MODE``): ``"exactly-once"`` (default), ``"window"`` or
        ``"at-least-once"``.
    batch_size
        Stream records per invocation, 1 to 10,000 (default 10,000, Lambda's maximum for a
        DynamoDB stream; the SAM template's ``BatchSize``). Lambda also ends a batch at 6 MB
        and after the batching window; larger batches coalesce more (docs: "Keeping up with a
        shard").
    window_seconds
        Tumbling window length in seconds, 1 to 900 (default 60; ``WindowSeconds``). Lambda
        names the shard only with tumbling windows, which the exactly-once modes need.
    tracing
        ``True``: X-Ray tracing ``Active`` (and the role's X-Ray writes, the handler's
        Powertools ``Tracer``); ``False`` (default): ``PassThrough``.
    log_level
        ``POWERTOOLS_LOG_LEVEL`` (default ``"INFO"``).
    log_retention
        Retention of the function's log group (default one month, as ``LogRetentionDays``).
    service_name
        ``POWERTOOLS_SERVICE_NAME``: the ``service`` dimension of the handler's metrics, which
        ``DeadLettersAlarm`` watches. Default: the stack's name (``AWS::StackName``), as the
        SAM template; give each aggregator its own when a stack holds several.
    alarms
        Create the three CloudWatch alarms (default ``True``; ``Alarms``).
    alarm_topic
        An SNS topic the alarms notify, into alarm and back to OK (default: none; the alarms
        only change state).
    iterator_age_alarm_milliseconds
        ``IteratorAgeAlarm`` fires when the age of the newest record read (``IteratorAge``,
        Maximum, in milliseconds) stays above this for 5 minutes; at least 1,000 (default
        600,000: 10 minutes).
    home_region
        For a global table: the one Region whose stream the function counts (the SAM
        template's ``HomeRegion``; ``AGGREGATOR_HOME_REGION``). Deploy the construct in a stack
        per Region with the same value: only the stack in that Region gets the stream
        subscription (and its ``IteratorAgeAlarm``); the others get the function, which refuses
        to count there. The condition compares with ``AWS::Region`` at deployment, so it holds
        for region-agnostic stacks too. ``None`` (the default): a table without replicas,
        counted in the stack's Region (no condition).
    backfill
        Create the backfill on AWS (default ``True``; the SAM template's ``Backfill``):
        ``Backfill``, a :class:`~aggregator.cdk.backfill.BackfillOnAws` (the backfill function,
        the state machine, their roles; docs "Backfill on AWS"). With ``home_region``, under the
        ``CountHere`` condition too: a backfill elsewhere would count twice.
    backfill_memory_size
        The backfill function's memory in MB, 128 to 10,240 (default 1,769, one vCPU;
        ``BackfillMemorySize``).
    dashboard
        Create ``Dashboard``, the CloudWatch dashboard of the function (default ``True``; the
        SAM template's ``Dashboard``): the same widgets, from
        :func:`aggregator.deploy.dashboard.dashboard_body`.
    threshold_event_bus
        The name of the EventBridge bus that receives the crossings of rules with
        ``thresholds`` (default ``default``, the account's; the SAM template's
        ``ThresholdEventBus``; ``AGGREGATOR_EVENT_BUS``). The role may put events there only,
        and only when a rule has thresholds.

    Attributes
    ----------
    backfill : BackfillOnAws or None
        The backfill on AWS (``backfill.state_machine.attr_arn``: what ``aggregator backfill``
        starts), or ``None`` without ``backfill``.
    function : aws_lambda.Function
    event_source_mapping : aws_lambda.EventSourceMapping
    count_here : aws_cdk.CfnCondition or None
        ``CountHere``, with ``home_region``.
    role : aws_iam.Role
        The role itself (the function holds an immutable view of it).
    queue : aws_sqs.Queue
    log_group : aws_logs.LogGroup
    alarms : tuple of aws_cloudwatch.Alarm
        ``(IteratorAgeAlarm, DeadLettersAlarm, FailureQueueAlarm)``, or empty without
        ``alarms``.
    rules : RuleSet
        The rules loaded from ``rules``.

    Raises
    ------
    ConfigError
        When the table has no stream ARN, a table defined in the app has a stream of another
        view type than ``NEW_AND_OLD_IMAGES`` or keys other than the rules' layout's, a setting
        is out of range, ``home_region`` is not a Region name, ``artifact`` is not an artifact
        of these rules, or as
        :func:`aggregator.cli.project.build.rule_files` and
        :func:`aggregator.cli.template.render_regions`; when the artifact is built at synth
        time (which happens here, when CDK stages the asset), as
        :func:`aggregator.cli.project.build.build_function` (pip failing).
    RuleError
        When the rules are invalid.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        rules: RulePaths,
        artifact: str | os.PathLike[str] | None = None,
        boto3: str = "bundle",
        mode: str = "exactly-once",
        batch_size: int = 10_000,
        window_seconds: int = 60,
        tracing: bool = False,
        log_level: str = "INFO",
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        service_name: str | None = None,
        alarms: bool = True,
        alarm_topic: sns.ITopic | None = None,
        iterator_age_alarm_milliseconds: int = 600_000,
        home_region: str | None = None,
        backfill: bool = True,
        backfill_memory_size: int = BACKFILL_MEMORY_MB,
        threshold_event_bus: str = "default",
        dashboard: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        if mode not in WRITE_MODES:
            raise ConfigError(f"mode must be one of {', '.join(WRITE_MODES)}, got {mode!r}")
        if boto3 not in ("bundle", "runtime"):
            raise ConfigError(f"boto3 must be 'bundle' or 'runtime', got {boto3!r}")
        _check_range("batch_size", batch_size, 1, 10_000)
        _check_range("window_seconds", window_seconds, 1, 900)
        _check_range("iterator_age_alarm_milliseconds", iterator_age_alarm_milliseconds, 1_000)
        _check_range("backfill_memory_size", backfill_memory_size, 128, 10_240)
        if (
            home_region  # "" is no home Region, as the SAM template's empty HomeRegion
            and not Token.is_unresolved(home_region)
            and not re.fullmatch(REGION_PATTERN, home_region)
        ):
            raise ConfigError(
                f"home_region must be a Region name such as eu-west-1, got {home_region!r}"
            )
        paths = _paths(rules)
        files = rule_files(paths)
        self.rules: RuleSet = load_rules(files)
        regions = render_regions(self.rules)
        stream_arn = _stream_arn(table, self.rules.layout)
        table_arn = (
            table.table_arn
            if isinstance(table.node.default_child, CfnResource)
            else Fn.select(0, Fn.split("/stream/", stream_arn))
        )
        service = Aws.STACK_NAME if service_name is None else service_name

        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            retention_period=QUEUE_RETENTION,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.log_group = logs.LogGroup(
            self, "LogGroup", retention=log_retention, removal_policy=RemovalPolicy.DESTROY
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=(
                "ddb-aggregator function - reads the table's stream, writes only its own partitions"
            ),
            inline_policies={
                "ddb-aggregator": iam.PolicyDocument(
                    statements=role_statements(
                        regions,
                        stream_arn=stream_arn,
                        table_arn=table_arn,
                        queue_arn=self.queue.queue_arn,
                        log_group_arn=self.log_group.log_group_arn,
                        tracing=tracing,
                    )
                ),
                **target_policies(
                    regions,
                    table_arn,
                    self.rules.layout.leaderboard_index,
                    event_bus=threshold_event_bus,
                ),
            },
        )
        local_build = (
            None
            if artifact is not None
            else LocalBuild(files, boto3, FunctionRuntime.of(RUNTIME.name, ARCHITECTURE.name))
        )
        self.function_environment: dict[str, str] = {
            "AGGREGATOR_TABLE_NAME": table.table_name,
            # a table table_for_rules created comes with this stream: it holds every
            # write, so new rules need no backfill (as the SAM template's own table)
            "AGGREGATOR_GENESIS_STREAM_ARN": (stream_arn if _created_for_rules(table) else ""),
            "AGGREGATOR_DEFINITIONS": DEFINITIONS_DIR,
            "AGGREGATOR_MODE": mode,
            "AGGREGATOR_HOME_REGION": home_region or "",
            "AGGREGATOR_EVENT_BUS": threshold_event_bus,
            "AGGREGATOR_CHECKPOINT_RETENTION_SECONDS": str(CHECKPOINT_RETENTION_SECONDS),
            "AGGREGATOR_ON_FAILURE_QUEUE_URL": self.queue.queue_url,
            "POWERTOOLS_SERVICE_NAME": service,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "POWERTOOLS_LOG_LEVEL": log_level,
            "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true",
        }
        """The stream function's environment variables (the backfill function's, less the queue
        and tracing)."""
        try:
            code = function_code(files, artifact, local_build, RUNTIME)
            self.function = lambda_.Function(
                self,
                "Function",
                code=code,
                handler=HANDLER,
                runtime=RUNTIME,
                architecture=ARCHITECTURE,
                memory_size=MEMORY_MB,
                timeout=Duration.seconds(TIMEOUT_SECONDS),
                role=self.role.without_policy_updates(),
                tracing=lambda_.Tracing.ACTIVE if tracing else lambda_.Tracing.PASS_THROUGH,
                log_group=self.log_group,
                environment=self.function_environment,
            )
        except RuntimeError:
            # the local build's own error, not jsii's wrapping of it
            if local_build is not None and local_build.error is not None:
                raise local_build.error from None
            raise
        self.event_source_mapping = lambda_.EventSourceMapping(
            self,
            "Stream",
            target=self.function,
            event_source_arn=stream_arn,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=batch_size,
            max_batching_window=Duration.seconds(MAX_BATCHING_WINDOW_SECONDS),
            # one batch at a time per shard, in order: the checkpoint protocol relies on it
            parallelization_factor=1,
            tumbling_window=Duration.seconds(window_seconds),
            report_batch_item_failures=True,
            bisect_batch_on_error=True,
            retry_attempts=RETRY_ATTEMPTS,
            max_record_age=Duration.seconds(MAX_RECORD_AGE_SECONDS),
            on_failure=event_sources.SqsDlq(self.queue),
        )
        # The patterns exactly as the SAM template holds them (JSON text): the mapping's own
        # `filters` would re-serialize them.
        mapping = self.event_source_mapping.node.default_child
        assert isinstance(mapping, lambda_.CfnEventSourceMapping)
        mapping.filter_criteria = lambda_.CfnEventSourceMapping.FilterCriteriaProperty(
            filters=[
                lambda_.CfnEventSourceMapping.FilterProperty(pattern=f["Pattern"])
                for f in regions["filters"]["FilterCriteria"]["Filters"]
            ]
        )
        body = regions["dashboard"]["DashboardBody"]["Fn::Sub"][0]
        self.dashboard: cloudwatch.CfnDashboard | None = (
            cloudwatch.CfnDashboard(
                self,
                "Dashboard",
                dashboard_name=Fn.sub("${AWS::StackName}-aggregator"),
                dashboard_body=Fn.sub(
                    body,
                    {
                        "Function": self.function.function_name,
                        "TableName": table.table_name,
                        "Service": service,
                    },
                ),
            )
            if dashboard
            else None
        )
        self.alarms: tuple[cloudwatch.Alarm, ...] = (
            self._alarms(service, table, iterator_age_alarm_milliseconds, alarm_topic)
            if alarms
            else ()
        )
        self.backfill: BackfillOnAws | None = (
            BackfillOnAws(
                self,
                "Backfill",
                code=code,
                handler=BACKFILL_HANDLER,
                runtime=RUNTIME,
                architecture=ARCHITECTURE,
                environment=self.function_environment,
                regions=regions,
                table_arn=table_arn,
                stream_arn=stream_arn,
                leaderboard_index=self.rules.layout.leaderboard_index,
                collection_index=(
                    self.rules.layout.collection_index
                    if reads_collection_index(self.rules)
                    else None
                ),
                memory_size=backfill_memory_size,
                log_retention=log_retention,
            )
            if backfill
            else None
        )
        # A global table: the subscription (and its lag alarm) only in the home Region; the
        # condition is decided at deployment (AWS::Region), so region-agnostic stacks get it too
        self.count_here: CfnCondition | None = None
        if home_region:
            self.count_here = CfnCondition(
                self, "CountHere", expression=Fn.condition_equals(home_region, Aws.REGION)
            )
            lag_alarm = [self.alarms[0].node.default_child] if self.alarms else []
            # the backfill too: elsewhere it would count twice
            backfill_resources = self.backfill.resources() if self.backfill else []
            for resource in (mapping, *lag_alarm, *backfill_resources):
                assert isinstance(resource, CfnResource)
                resource.cfn_options.condition = self.count_here

    def _alarms(
        self,
        service: str,
        table: dynamodb.ITable,
        iterator_age_milliseconds: int,
        topic: sns.ITopic | None,
    ) -> tuple[cloudwatch.Alarm, ...]:
        """The SAM template's three alarms; missing data (no traffic) is not an alarm."""
        at_least = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        lag = self._alarm(
            "IteratorAgeAlarm",
            "${Service}: the aggregator falls behind its stream (IteratorAge above "
            "${Threshold} ms for 5 minutes); see the function's logs and Duration",
            {"Service": service, "Threshold": Token.as_string(iterator_age_milliseconds)},
            self.function.metric("IteratorAge", statistic="Maximum", period=Duration.minutes(1)),
            threshold=iterator_age_milliseconds,
            evaluation_periods=5,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )
        dead_letters = self._alarm(
            "DeadLettersAlarm",
            "${Service}: records the rules could not evaluate were dead-lettered; list "
            "them with aggregator dead-letters --table ${Table}",
            {"Service": service, "Table": table.table_name},
            cloudwatch.Metric(
                namespace=METRICS_NAMESPACE,
                metric_name="DeadLetters",
                dimensions_map={"service": service},
                statistic="Sum",
                period=Duration.minutes(5),
            ),
            threshold=1,
            evaluation_periods=1,
            comparison=at_least,
        )
        failures = self._alarm(
            "FailureQueueAlarm",
            "${Service}: the on-failure queue holds messages (batches that exhausted their "
            "retries, or dead letters DynamoDB refused); read them from ${Queue}",
            {"Service": service, "Queue": self.queue.queue_url},
            self.queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=Duration.minutes(5)
            ),
            threshold=1,
            evaluation_periods=1,
            comparison=at_least,
        )
        created = (lag, dead_letters, failures)
        if topic is not None:
            action = cloudwatch_actions.SnsAction(topic)
            for alarm in created:
                alarm.add_alarm_action(action)
                alarm.add_ok_action(action)
        return created

    def _alarm(
        self,
        construct_id: str,
        description: str,
        variables: dict[str, str],
        metric: cloudwatch.IMetric,
        *,
        threshold: int,
        evaluation_periods: int,
        comparison: cloudwatch.ComparisonOperator,
    ) -> cloudwatch.Alarm:
        """One alarm of the SAM template's: its description ``Fn::Sub``'d with ``variables``;
        missing data (no traffic) is not an alarm."""
        return cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=Fn.sub(description, variables),
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=comparison,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    @staticmethod
    def table_for_rules(
        scope: Construct,
        construct_id: str,
        *,
        rules: RulePaths,
        table_name: str | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> dynamodb.Table:
        """A new table with the layout ``rules`` need, as the SAM template creates it.

        The keys, the sparse leaderboard index and, without a sort key, the collection index
        of :func:`aggregator.dynamodb.table.table_definition` for the rules' layout (their
        ``table:`` section; ``pk``/``sk`` strings by default), on-demand capacity, a
        ``NEW_AND_OLD_IMAGES`` stream, TTL on the layout's TTL attribute and point-in-time
        recovery.

        Parameters
        ----------
        scope, construct_id
            Where the table goes.
        rules
            Rule files or directories, as for :class:`AggregatorFunction`.
        table_name
            The table's name; default: one CloudFormation generates.
        removal_policy
            Default ``RETAIN`` (the table holds your items): deleting the stack keeps it.

        Returns
        -------
        aws_dynamodb.Table
            An ``AWS::DynamoDB::Table``, to pass as ``table``.

        Raises
        ------
        ConfigError, RuleError
            As for :class:`AggregatorFunction`'s ``rules``.
        """
        layout = load_rules(rule_files(_paths(rules))).layout
        definition = table_definition(layout)
        types = {a["AttributeName"]: a["AttributeType"] for a in definition["AttributeDefinitions"]}

        def keys(schema: list[dict[str, str]]) -> tuple[dynamodb.Attribute, ...]:
            """``(partition key, sort key)`` attributes, or just the partition key."""
            named = {k["KeyType"]: k["AttributeName"] for k in schema}
            return tuple(
                dynamodb.Attribute(name=named[kind], type=_ATTRIBUTE_TYPES[types[named[kind]]])
                for kind in ("HASH", "RANGE")
                if kind in named
            )

        partition_key, *sort_key = keys(definition["KeySchema"])
        table = dynamodb.Table(
            scope,
            construct_id,
            table_name=table_name,
            partition_key=partition_key,
            sort_key=sort_key[0] if sort_key else None,
            billing_mode=dynamodb.BillingMode[definition["BillingMode"]],
            stream=dynamodb.StreamViewType[definition["StreamSpecification"]["StreamViewType"]],
            time_to_live_attribute=layout.ttl_attribute,
            removal_policy=removal_policy,
        )
        for index in definition["GlobalSecondaryIndexes"]:
            index_partition_key, *index_sort_key = keys(index["KeySchema"])
            table.add_global_secondary_index(
                index_name=index["IndexName"],
                partition_key=index_partition_key,
                sort_key=index_sort_key[0] if index_sort_key else None,
                projection_type=dynamodb.ProjectionType[index["Projection"]["ProjectionType"]],
            )
        table.node.add_metadata(_GENESIS_METADATA, True)
        # the L1 property (the L2's own option for it changed name across CDK releases)
        resource = table.node.default_child
        assert isinstance(resource, dynamodb.CfnTable)
        resource.point_in_time_recovery_specification = (
            dynamodb.CfnTable.PointInTimeRecoverySpecificationProperty(
                point_in_time_recovery_enabled=True
            )
        )
        return table


def _paths(rules: RulePaths) -> list[Path]:
    if isinstance(rules, str | os.PathLike):
        return [Path(rules)]
    return [Path(p) for p in rules]


def _check_range(name: str, value: int, low: int, high: int | None = None) -> None:
    """Refuse a literal ``value`` outside ``[low, high]`` (a token is left to CloudFormation).

    Raises
    ------
    ConfigError
        Naming the setting and its bounds.
    """
    if Token.is_unresolved(value):
        return
    if value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{name} must be {bounds}, got {value}")


_GENESIS_METADATA = "aggregator:genesis"
"""Construct metadata on a table :meth:`AggregatorFunction.table_for_rules` created with its
stream (so the function may record the stream's genesis)."""


def _created_for_rules(table: dynamodb.ITable) -> bool:
    """Whether ``table`` was created by :meth:`AggregatorFunction.table_for_rules`."""
    return any(entry.type == _GENESIS_METADATA for entry in table.node.metadata)


def _stream_arn(table: dynamodb.ITable, layout: TableLayout) -> str:
    """The table's stream ARN, after checking what can be checked at synth time: a table
    defined in the app must have the stream view type and the keys ``layout`` needs.

    Raises
    ------
    ConfigError
        When the table has no stream ARN, or its definition disagrees with ``layout``.
    """
    where = f"table {table.node.path}"
    arn = table.table_stream_arn
    if arn is None:
        raise ConfigError(
            f"{where} has no stream ARN: the aggregator reads the table's stream (view type "
            f"{VIEW_TYPE}); create the table with stream {VIEW_TYPE} "
            "(AggregatorFunction.table_for_rules does), or import it with "
            "Table.from_table_attributes(..., table_arn=ARN, table_stream_arn=STREAM_ARN)"
        )
    resource = table.node.default_child
    if not isinstance(resource, dynamodb.CfnTable | dynamodb.CfnGlobalTable):
        return arn
    view_type = getattr(_read(resource, "stream_specification"), "stream_view_type", None)
    if isinstance(view_type, str) and view_type != VIEW_TYPE:
        raise ConfigError(
            f"{where}: its stream's view type is {view_type}, the aggregator needs {VIEW_TYPE} "
            "(deltas need both images)"
        )
    description = {
        "AttributeDefinitions": [
            {"AttributeName": a.attribute_name, "AttributeType": a.attribute_type}
            for a in _literal_list(_read(resource, "attribute_definitions"))
        ],
        "KeySchema": [
            {"AttributeName": k.attribute_name, "KeyType": k.key_type}
            for k in _literal_list(_read(resource, "key_schema"))
        ],
    }
    if description["KeySchema"]:
        problems = key_schema_problems(table.node.path, description, layout)
        if problems:
            raise ConfigError(f"{where}: " + "; ".join(p.line() for p in problems))
    return arn


def _read(resource: CfnResource, name: str) -> object:
    """A property of an L1 resource, or ``None`` when jsii cannot hand it over (``TableV2``
    keeps its stream view type as an enum where ``CfnGlobalTable`` declares a string)."""
    try:
        return getattr(resource, name)
    except (RuntimeError, JSIIError):
        return None


def _literal_list(value: object) -> list[Any]:
    """``value`` when it is a list of property structs; empty for a token (not checkable)."""
    if isinstance(value, list) and all(hasattr(v, "attribute_name") for v in value):
        return value
    return []
