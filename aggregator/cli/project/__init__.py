"""A project of the user's own: ``aggregator init`` writes it (:mod:`.scaffold`), ``sam build``
builds its function with ``aggregator build`` (:mod:`.build`).

The files here besides the modules are package data: ``template.yaml`` (the SAM template, its
rendered regions filled in for the demo rules of the framework's repository), ``Makefile`` (the
build recipe), ``samconfig.toml`` and ``rules/example.yaml`` (the starter rule file).
"""
