"""Install ``app/``, ``models/`` and ``converters/`` as subpackages of one import package, ``lnserve``.

pyproject.toml holds all metadata; only the folder-to-package mapping needs code, because each top-level
folder becomes ``lnserve.<folder>`` (setuptools cannot prefix ``packages.find`` results declaratively).
"""

from setuptools import find_packages, setup

SUBPACKAGES = ("app", "models", "converters")

packages = ["lnserve"]
package_dir = {"lnserve": "lnserve"}
for root in SUBPACKAGES:
    package_dir[f"lnserve.{root}"] = root
    packages += [f"lnserve.{name}" for name in find_packages(include=[root, f"{root}.*"])]
packages.append("lnserve.app.demo_model")  # data only: the embedded demo artifact and its gallery

setup(packages=packages, package_dir=package_dir)
