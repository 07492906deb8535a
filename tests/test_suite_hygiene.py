"""The suite stays bounded in CI: a Hypothesis "ci" profile (few, reproducible examples, no
deadline) chosen by CI=true, which also caps tests that set max_examples themselves."""

from __future__ import annotations

from hypothesis import settings

from testkit import CI_MAX_EXAMPLES, examples, hypothesis_profile


def test_the_ci_profile_is_bounded_reproducible_and_has_no_deadline():
    ci = settings.get_profile("ci")
    assert ci.max_examples == CI_MAX_EXAMPLES and ci.deadline is None and ci.derandomize
    assert settings.get_profile("dev").deadline is None


def test_ci_true_selects_the_ci_profile_and_caps_explicit_example_counts(monkeypatch):
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    monkeypatch.setenv("CI", "true")
    assert hypothesis_profile() == "ci" and examples(200) == CI_MAX_EXAMPLES
    assert examples(10) == 10
    monkeypatch.setenv("CI", "")
    assert hypothesis_profile() == "dev" and examples(200) == 200
