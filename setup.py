"""Build hook, everything else is in pyproject.toml: ship inside the package (vqa_r1/) what the
repository keeps beside it, so that an installed wheel needs no checkout: the tested versions
(constraints.txt, the CPU set, and constraints-gpu.txt, the GPU set: `vqa-r1 doctor`), the
cluster profiles (slurm/clusters -> vqa_r1/clusters) and the judge prompts
(alignment_judge/prompts -> vqa_r1/judge_prompts). A checkout reads its own files first
(vqa_r1/paths.py ``shipped``)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        for name in ("constraints.txt", "constraints-gpu.txt"):
            source = Path(__file__).resolve().parent / name
            if source.exists():  # an sdist carries them too (MANIFEST.in)
                target = Path(self.build_lib) / "vqa_r1" / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
        for folder, name, pattern in (
            ("slurm/clusters", "clusters", "*.yaml"),
            ("alignment_judge/prompts", "judge_prompts", "*.txt"),
        ):
            for source in sorted((Path(__file__).resolve().parent / folder).glob(pattern)):
                target = Path(self.build_lib) / "vqa_r1" / name / source.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)


setup(cmdclass={"build_py": BuildPy})
