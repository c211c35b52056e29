"""Helpers for tests and benches, not for pipelines: a real forwarding HTTP proxy in front of a real server."""

from icr2_components.testing.forwarding_proxy import ForwardingProxy, ProxyReply

__all__ = ["ForwardingProxy", "ProxyReply"]
