"""The aggregator as an AWS CDK (v2) construct: what ``template.yaml`` deploys, for CDK apps.

An optional extra (``pip install 'ddb-aggregator[cdk]'``: ``aws-cdk-lib`` and ``constructs``).
:class:`AggregatorFunction` takes a table (created by the app, or imported with its stream ARN)
and the rule files, and creates the function, its stream subscription with the rules' filters,
its role, its on-failure queue, its log group and, optionally, the alarms, with the settings,
grants and metrics of the SAM template (``aggregator/cli/project/template.yaml``);
:meth:`AggregatorFunction.table_for_rules` creates a table with the layout the rules need.

Nothing else in the package imports this one, and the Lambda artifact leaves it out (import-linter
contracts in ``pyproject.toml``): ``aws_cdk`` is imported here only.
"""

try:
    from aggregator.cdk.function import AggregatorFunction, RulePaths
except ModuleNotFoundError as exc:  # the extra is not installed
    if exc.name not in ("aws_cdk", "constructs", "jsii"):
        raise
    raise ModuleNotFoundError(
        f"aggregator.cdk needs the AWS CDK: pip install 'ddb-aggregator[cdk]' ({exc})",
        name=exc.name,
    ) from None

__all__ = ["AggregatorFunction", "RulePaths"]
