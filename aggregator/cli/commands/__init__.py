"""The commands of ``aggregator`` by area, each thin (parse, call, print);
:mod:`aggregator.cli.main` registers them."""
