"""navigator.validators (installed from the top-level folder `validators/`)."""

if __name__ != "navigator.validators":  # pragma: no cover - guard, see ARCHITECTURE.md
    raise ImportError(
        "this folder is the subpackage navigator.validators; import it as 'navigator.validators', "
        "not under its bare name 'validators' (install the project with pip install -e .)"
    )
