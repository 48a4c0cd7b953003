"""Only the package list lives here; everything else is in pyproject.toml.

``delegates/`` is installed as ``edgerun_delegates`` (``[tool.setuptools.package-dir]``), and
setuptools' ``find`` does not follow that mapping, so its subpackages are listed explicitly.
"""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["edgerun", "edgerun.*"])
      + ["edgerun_delegates"] + [f"edgerun_delegates.{p}" for p in find_packages("delegates")])
