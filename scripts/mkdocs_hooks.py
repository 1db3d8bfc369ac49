"""mkdocs hook (mkdocs.yml ``hooks``): the plots under results/ become files of the site, so that a
page's ``![...](../results/...png)`` shows the committed plot itself, not a copy kept in docs/
that could drift from what `vqa-r1 tables` rebuilt. Only images: results/ also holds run folders."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

REPO = Path(__file__).resolve().parents[1]


def on_files(files, config):
    for image in sorted((REPO / "results").rglob("*.png")):
        uri = image.relative_to(REPO).as_posix()
        files.append(File.generated(config, uri, abs_src_path=str(image)))
    return files
