"""MkDocs hooks: files of the repository that live outside ``docs/`` but belong to the site.

- ``bench/plots/*.png`` (the committed plots of ``make bench`` and ``make bench-scale``) are
  served as ``assets/plots/*.png``, so the pages show the plots the benchmarks last drew;
- ``bench/README.md`` becomes the page ``benchmarks/bench-readme.md``, its link into the old
  README pointed at the page that now holds that section.

The files stay where the benchmarks write them: nothing is copied into ``docs/``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
BENCH_README = "benchmarks/bench-readme.md"
# links of bench/README.md that point outside the site: their place in it
BENCH_LINKS = {"](../README.md#scaling)": "](../concepts/scaling.md)"}


def on_files(files: Files, config) -> Files:
    for plot in sorted((ROOT / "bench" / "plots").glob("*.png")):
        files.append(File.generated(config, f"assets/plots/{plot.name}", abs_src_path=str(plot)))
    readme = ROOT / "bench" / "README.md"
    files.append(File.generated(config, BENCH_README, abs_src_path=str(readme)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri == BENCH_README:
        for old, new in BENCH_LINKS.items():
            markdown = markdown.replace(old, new)
    return markdown
