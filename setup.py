"""Install ``app/``, ``models/`` and ``converters/`` as subpackages of one import package, ``lnserve``.

pyproject.toml holds all metadata; only the folder-to-package mapping needs code, because each top-level
folder becomes ``lnserve.<folder>`` (setuptools cannot prefix ``packages.find`` results declaratively).

Where a C++ compiler exists, the install also builds the fused LN-GRU step (an onnxruntime custom-op library,
``app/runtime/fused_op``). It is optional: without a compiler the build says so and the install goes on, and
the onnx backend runs the plain graph (``lnserve.app.runtime.fused_op``).
"""

from setuptools import Extension, find_packages, setup

SUBPACKAGES = ("app", "models", "converters")

packages = ["lnserve", "lnserve.eval"]  # lnserve.eval: public names for outside tools (SentEval)
package_dir = {"lnserve": "lnserve"}
for root in SUBPACKAGES:
    package_dir[f"lnserve.{root}"] = root
    packages += [f"lnserve.{name}" for name in find_packages(include=[root, f"{root}.*"])]

# A plain shared library that onnxruntime dlopens (not a Python module). Portable flags only: the row loop is
# compiled per x86-64 level and picked at load time (see lngru_step.cc), never -march=native.
fused_op = Extension(
    "lnserve.app.runtime.fused_op.lib._lngru_step",  # lib/: not a package (fused_op.library_path)
    sources=["app/runtime/fused_op/lngru_step.cc", "app/runtime/fused_op/lngru_sequence.cc"],
    depends=[
        "app/runtime/fused_op/ort_abi.h",
        "app/runtime/fused_op/ort_kernel.h",
        "app/runtime/fused_op/lngru_math.h",
        "app/runtime/fused_op/lngru_sequence.h",
    ],
    language="c++",
    extra_compile_args=[
        "-O3",
        "-std=c++17",
        "-fopenmp-simd",
        "-fno-math-errno",
        "-fno-exceptions",
        "-fno-rtti",
        "-fvisibility=hidden",
    ],
    optional=True,  # a failed build is reported and skipped; the install succeeds
)

setup(packages=packages, package_dir=package_dir, ext_modules=[fused_op])
