"""Shared test settings: hypothesis profiles (CI is 2 cores, so property runs stay bounded)."""
import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=int(os.environ.get("POLYSAT_HYPOTHESIS_EXAMPLES", "40")),
                          deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
