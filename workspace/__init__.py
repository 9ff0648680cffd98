"""navigator.workspace (installed from the top-level folder `workspace/`)."""

if __name__ != "navigator.workspace":  # pragma: no cover - guard, see ARCHITECTURE.md
    raise ImportError(
        "this folder is the subpackage navigator.workspace; import it as 'navigator.workspace', "
        "not under its bare name 'workspace' (install the project with pip install -e .)"
    )
