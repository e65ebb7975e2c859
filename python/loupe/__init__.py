"""loupe for Python: tensor diffs that say where, assert_close with localisation, layer dumps,
trace analyses and probes, on libloupe (C++) in-process.

Example::

    import loupe, torch
    loupe.assert_close(model(x), reference(x), axes="B,T,D", along="T")
    print(loupe.diff(dump_a, dump_b))          # two loupe.dump directories
"""

from ._errors import (ConfigError, Error, InputError, InternalError, SubjectError,  # noqa: F401
                      UsageError)
from ._diff import (DEFAULT_TOLERANCES, DiffResult, Profile, TensorDiff, Worst,  # noqa: F401
                    assert_close, diff)
from ._arrays import Bits  # noqa: F401
from .dump import dump  # noqa: F401
from .generations import GenerationComparison, compare_generations  # noqa: F401
from . import sglang, trace  # noqa: F401
from .probe import (Output, Param, bench, check, scenario, subject_main)  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "Error", "UsageError", "ConfigError", "InputError", "SubjectError", "InternalError",
    "diff", "assert_close", "Bits", "compare_generations", "GenerationComparison", "DiffResult",
    "TensorDiff", "Worst", "Profile", "DEFAULT_TOLERANCES",
    "dump", "sglang", "trace", "check", "bench", "scenario", "Param", "Output", "subject_main",
]
