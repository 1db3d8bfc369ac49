"""Build hook, everything else is in pyproject.toml: ship constraints.txt, the tested versions,
inside the package (vqa_r1/constraints.txt), so that `vqa-r1 doctor` in a non-editable install
checks the same set as a checkout (launch/doctor.py reads the checkout's file first)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    def run(self):
        super().run()
        source = Path(__file__).resolve().parent / "constraints.txt"
        if source.exists():  # an sdist carries it too (MANIFEST.in)
            target = Path(self.build_lib) / "vqa_r1" / "constraints.txt"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


setup(cmdclass={"build_py": BuildPy})
