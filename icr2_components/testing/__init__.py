"""Helpers for tests and benches, not for pipelines: a real forwarding HTTP proxy in front of a real server, and a
real server answering every request with one fixed reply."""

from icr2_components.testing.fixed_answer_server import FixedAnswerServer
from icr2_components.testing.forwarding_proxy import ForwardingProxy

__all__ = [
    "FixedAnswerServer",
    "ForwardingProxy",
]
