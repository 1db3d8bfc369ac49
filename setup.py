"""Build hook, everything else is in pyproject.toml: ship the tested versions (constraints.txt,
the CPU set, and constraints-gpu.txt, the GPU set) inside the package (vqa_r1/), so that `vqa-r1
doctor` in a non-editable install checks the same sets as a checkout (launch/doctor.py reads the
checkout's files first)."""

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


setup(cmdclass={"build_py": BuildPy})
