"""pytest setup for the tests of the Python module reshard (verify/python/test_*.py).

ctest runs them with PYTHONPATH holding the built package (<build>/python); run by hand:
    PYTHONPATH=build/python /usr/bin/python3 -m pytest -q -p no:cacheprovider verify/python
The helpers beside this file (ms_scenario.py, ms_files.py, ms_proto/) write and check
MindSpore-schema files independently of reshard's C++.
"""

import os
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hypothesis  # noqa: E402

# Moderate example counts: the whole run stays well under a minute on two cores.
hypothesis.settings.register_profile("reshard", max_examples=100, deadline=None, derandomize=False,
                                     database=None, print_blob=True)
hypothesis.settings.load_profile(os.environ.get("RESHARD_HYPOTHESIS_PROFILE", "reshard"))
