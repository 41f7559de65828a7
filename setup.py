"""Packaging: everything is in setup.cfg but the twisted plugin package."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["kdraexp", "kdraexp.*"]), "twisted.plugins"])
