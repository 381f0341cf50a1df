"""Shared test settings: hypothesis profiles (CI is 2 cores, so property runs stay bounded).

`ci` (the default) is derandomized: the same examples every run, so a landing never depends on luck;
`dev` (HYPOTHESIS_PROFILE=dev) draws fresh examples each run to keep exploring.
"""
import os

from hypothesis import HealthCheck, settings

_examples = int(os.environ.get("POLYSAT_HYPOTHESIS_EXAMPLES", "40"))
settings.register_profile("ci", max_examples=_examples, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=_examples, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
