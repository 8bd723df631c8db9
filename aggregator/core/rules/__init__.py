"""Rule definitions: pydantic models, YAML loading and Python registration (pure, no I/O but files).

The package re-exports the names of its modules:

* :mod:`~aggregator.core.rules.model`: :class:`Rule`, :class:`Contribution`, sort-key limits;
* :mod:`~aggregator.core.rules.ruleset`: :class:`RuleSet`, :func:`rule`, derived-rule checks;
* :mod:`~aggregator.core.rules.keys`: :class:`KeyTemplate` and the key text of values;
* :mod:`~aggregator.core.rules.targets`: :class:`Target` (a sum kept on an application item);
* :mod:`~aggregator.core.rules.deltas`: :class:`DeltaSpec`;
* :mod:`~aggregator.core.rules.writes`: :class:`WriteSpec` (what the writers need of a rule);
* :mod:`~aggregator.core.rules.buckets`: :class:`Window` and :class:`Bucket`;
* :mod:`~aggregator.core.rules.files`: :func:`load_rules` (reading, parsing and validating rule
  files and directories);
* :mod:`~aggregator.core.rules.yaml_parser`: :class:`RuleLoader`, the strict YAML parser of rule
  files, and its limits;
* :mod:`~aggregator.core.rules.problems` (validation problems as one line each) and
  :mod:`~aggregator.core.rules.messages` (the words of those lines).
"""

from aggregator.core.rules.buckets import Bucket, GranularityField, Window
from aggregator.core.rules.deltas import DeltaSpec
from aggregator.core.rules.files import (
    MAX_RULE_FILE_BYTES,
    declared_layout,
    load_rules,
    rule_files_in,
)
from aggregator.core.rules.keys import (
    KeyTemplate,
    escape_key_part,
    format_key_value,
    unescape_key_part,
)
from aggregator.core.rules.model import (
    AUTO_WRITE_SHARDS,
    BUCKET_TEXT_BYTES,
    MAX_SORT_KEY_BYTES,
    RULE_NAME_PATTERN,
    Contribution,
    KeyField,
    MatchField,
    Rule,
)
from aggregator.core.rules.problems import MAX_PROBLEMS_PER_FILE
from aggregator.core.rules.ruleset import (
    RuleSet,
    derived_attribute_indexes,
    derived_attribute_problems,
    graph_problems,
    rule,
    target_problems,
)
from aggregator.core.rules.targets import Target
from aggregator.core.rules.thresholds import Threshold
from aggregator.core.rules.writes import WriteSpec
from aggregator.core.rules.yaml_parser import (
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    RuleFileLimitError,
    RuleLoader,
)

__all__ = [
    "AUTO_WRITE_SHARDS",
    "BUCKET_TEXT_BYTES",
    "MAX_PROBLEMS_PER_FILE",
    "MAX_RULE_FILE_BYTES",
    "MAX_SORT_KEY_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "RULE_NAME_PATTERN",
    "Bucket",
    "Contribution",
    "DeltaSpec",
    "GranularityField",
    "KeyField",
    "KeyTemplate",
    "MatchField",
    "Rule",
    "RuleFileLimitError",
    "RuleLoader",
    "RuleSet",
    "Target",
    "Threshold",
    "Window",
    "WriteSpec",
    "declared_layout",
    "derived_attribute_indexes",
    "derived_attribute_problems",
    "escape_key_part",
    "format_key_value",
    "graph_problems",
    "load_rules",
    "rule",
    "rule_files_in",
    "target_problems",
    "unescape_key_part",
]
