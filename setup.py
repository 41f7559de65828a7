"""Packaging: everything is in setup.cfg but the twisted plugin package."""

from setuptools import find_packages, setup

setup(
    # The checkout itself is the source root: an editable install puts it on sys.path (a .pth),
    # where twistd finds the plugin under twisted/plugins, as an installed wheel has it.
    package_dir={"": "."},
    packages=[*find_packages(include=["kdraexp", "kdraexp.*"]), "twisted.plugins"],
)
