"""What runs in Lambda: the stream processor (:mod:`aggregator.runtime.processor`) behind the
handler (:mod:`aggregator.handler`).

The operator jobs live in :mod:`aggregator.operations`, the deploy-time tools in
:mod:`aggregator.deploy`, and the local stream runner in :mod:`aggregator.dev.runner`; import
contracts in ``pyproject.toml`` keep them apart.
"""
