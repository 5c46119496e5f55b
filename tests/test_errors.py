from swerl.errors import ConfigError, EnvironmentProblem, SandboxTimeout, SwerlError


def test_exit_codes_follow_the_style_guide():
    assert ConfigError("x").exit_code == 2
    assert EnvironmentProblem("x").exit_code == 3
    assert isinstance(SandboxTimeout("x"), TimeoutError)
    assert isinstance(SandboxTimeout("x"), SwerlError)
