"""AgentConfig validation (pydantic; bad input names the field)."""

import pytest
from pydantic import ValidationError

from swerl.agent.config import AgentConfig


def test_prefill_defaults_to_none_and_needs_single_turn():
    assert AgentConfig().single_turn_prefill == "none"
    assert AgentConfig(protocol="single-turn", single_turn_prefill="starter_code").single_turn_prefill == "starter_code"
    with pytest.raises(ValidationError, match="only applies to protocol 'single-turn'"):
        AgentConfig(protocol="terminus-json", single_turn_prefill="fence")
    with pytest.raises(ValidationError, match="single_turn_prefill"):
        AgentConfig(protocol="single-turn", single_turn_prefill="body")
