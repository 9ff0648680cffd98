"""navigator.converters (installed from the top-level folder `converters/`)."""

if __name__ != "navigator.converters":  # pragma: no cover - guard, see ARCHITECTURE.md
    raise ImportError(
        "this folder is the subpackage navigator.converters; import it as 'navigator.converters', "
        "not under its bare name 'converters' (install the project with pip install -e .)"
    )
