"""The generic Registry behind register_gate_decider, register_decoding_rule, register_store_backend and
register_retrieval_method: register, get, names, duplicates, a reloaded module, the unknown-name error."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from icr2_components.registry import Registry, qualified_name

pytestmark = pytest.mark.unit


class UnknownWidgetError(ValueError):
    pass


class Widget:
    pass


class OtherWidget:
    pass


def widgets(**options) -> Registry[type]:
    return Registry("widget", UnknownWidgetError, **options)


def test_register_get_names_and_contains():
    registry = widgets()
    assert registry.register("widget", Widget) is Widget
    registry.register("other", OtherWidget)
    assert registry.get("widget") is Widget and registry.get("other") is OtherWidget
    assert registry.names() == ("other", "widget")
    assert "widget" in registry and "missing" not in registry and ["unhashable"] not in registry
    assert registry.unregister("other") is OtherWidget
    assert registry.names() == ("widget",)


def test_names_can_keep_registration_order():
    registry = widgets(sort_names=False)
    for name in ("zeta", "alpha", "mu"):
        registry.register(name, Widget)
    assert registry.names() == ("zeta", "alpha", "mu")
    registry.register("zeta", Widget)  # registering again keeps the first position
    assert registry.names() == ("zeta", "alpha", "mu")


def test_a_name_held_by_another_object_is_refused_naming_the_holder():
    registry = widgets()
    registry.register("widget", Widget)
    module = __name__.replace(".", r"\.")
    with pytest.raises(ValueError, match=rf"^The widget name 'widget' is taken by {module}\.Widget; choose another "
                                         rf"name for {module}\.OtherWidget\.$"):
        registry.register("widget", OtherWidget)
    assert registry.get("widget") is Widget
    assert registry.register("widget", Widget) is Widget  # the same object again is fine


def test_the_duplicate_message_and_the_compared_object_can_be_customised():
    def function():
        pass

    def other_function():
        pass

    registry: Registry[tuple] = Registry(
        "method", origin=lambda entry: entry[0],
        taken_message=lambda name, holder, newcomer: f"{name}: {holder.__name__} holds it, not {newcomer.__name__}",
    )
    registry.register("m", (function, 1))
    registry.register("m", (function, 2))  # another wrapper of the same function replaces the entry
    assert registry.get("m") == (function, 2)
    with pytest.raises(ValueError, match=r"^m: function holds it, not other_function$"):
        registry.register("m", (other_function, 1))


def test_a_reloaded_module_registers_its_class_again(tmp_path, monkeypatch):
    registry = widgets()
    module_path = tmp_path / "reloaded_widgets.py"
    module_path.write_text(textwrap.dedent("""
        class ReloadedWidget:
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("reloaded_widgets")
    try:
        first = module.ReloadedWidget
        registry.register("reloaded", first)
        second = importlib.reload(module).ReloadedWidget
        assert (
            second is not first and qualified_name(second) == qualified_name(first) == "reloaded_widgets.ReloadedWidget"
        )
        assert registry.register("reloaded", second) is second
        assert registry.get("reloaded") is second
    finally:
        sys.modules.pop("reloaded_widgets", None)


def test_objects_without_a_qualified_name_are_compared_by_identity():
    registry: Registry[object] = Registry("setting")
    registry.register("a", [1])
    with pytest.raises(ValueError, match=r"The setting name 'a' is taken by \[1\]; choose another name for \[1\]\."):
        registry.register("a", [1])


def test_an_unknown_name_raises_the_given_error_listing_the_registered_names():
    registry = widgets(how_to_add="Register one with registry.register(name, widget).")
    registry.register("b", Widget)
    registry.register("a", OtherWidget)
    with pytest.raises(UnknownWidgetError) as error:
        registry.get("c")
    assert str(error.value) == ("Unknown widget 'c'; choose one of ['a', 'b']. "
                                "Register one with registry.register(name, widget).")
    with pytest.raises(UnknownWidgetError, match=r"Unknown widget \['x'\]"):
        registry.get(["x"])  # an unhashable name is unknown, not a TypeError
    assert error.value.__cause__ is None and error.value.__suppress_context__


def test_the_unknown_name_message_can_be_customised():
    registry = widgets(sort_names=False, how_to_add="See the docs.",
                       unknown_message=lambda name, names: f"no {name!r} among {', '.join(names)}.")
    registry.register("b", Widget)
    registry.register("a", Widget)
    with pytest.raises(UnknownWidgetError, match=r"^no 'c' among b, a\. See the docs\.$"):
        registry.get("c")


def test_bad_construction_and_names_are_refused():
    with pytest.raises(ValueError, match="non-empty string"):
        Registry(" ")
    with pytest.raises(TypeError, match="Exception subclass"):
        Registry("widget", unknown_error=str)
    with pytest.raises(TypeError, match="must be a string, got 3"):
        widgets().register(3, Widget)


def test_the_four_registries_keep_their_messages_and_orders():
    from icr2_components.gates.gate_decider import gate_decider_class
    from icr2_components.readers.decoding_rules import UnknownDecodingRuleError
    from icr2_components.readers.decoding_rules.registry import decoding_rule_class
    from icr2_components.stores.backend import UnknownStoreBackendError, store_backend, store_backend_names
    from icr2_components.stores.retrieval_methods import (
        UnknownRetrievalMethodError,
        register_retrieval_method,
        retrieval_method,
        retrieval_method_names,
    )

    with pytest.raises(ValueError, match=r"^method must be one of the registered gate deciders \[.*'always'.*\], got "
                                         r"'x'\. A new method is a GateDecider subclass"):
        gate_decider_class("x")
    with pytest.raises(UnknownDecodingRuleError, match=r"^Unknown decoding rule 'x'; choose one of \['acd', 'cad', "):
        decoding_rule_class("x")
    with pytest.raises(UnknownStoreBackendError, match=rf"^Unknown store type 'x'; registered store types: "
                                                       rf"{', '.join(store_backend_names())}\. A new store is"):
        store_backend("x")
    assert retrieval_method_names()[:3] == ("bm25", "dense", "hybrid")
    with pytest.raises(UnknownRetrievalMethodError, match=r"^Unknown retrieval method 'x'; choose one of \('bm25', "
                                                           r"'dense', 'hybrid'"):
        retrieval_method("x")

    def bm25(index, query, top_k, filters):
        return []

    with pytest.raises(ValueError, match=r"^Retrieval method 'bm25' is already registered "
                                         r"\(icr2_components\.stores\.retrieval_methods\.bm25\)\.$"):
        register_retrieval_method("bm25")(bm25)
