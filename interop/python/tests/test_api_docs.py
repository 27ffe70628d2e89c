"""Every public name of the package, and every public method and property of
its classes, has a docstring: the API reference (npm run docs, pdoc) is
generated from them."""
import inspect

import gpuring


def _undocumented():
    for name in gpuring.__all__:
        obj = getattr(gpuring, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not (obj.__doc__ or "").strip():
                yield name
        if not inspect.isclass(obj):
            continue
        for member, value in vars(obj).items():
            if member.startswith("_"):
                continue
            target = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if (callable(target) or isinstance(target, property)) and not (target.__doc__ or "").strip():
                yield f"{name}.{member}"


def test_every_public_class_function_method_and_property_has_a_docstring():
    assert list(_undocumented()) == []
