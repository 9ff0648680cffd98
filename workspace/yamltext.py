"""YAML text Navigator reads (option files, policies, manifests, status.yaml): parsed safely, without
aliases, with bounded nesting, every failure one line naming its source."""

from __future__ import annotations

from navigator.errors import UserInputError


def _no_alias_loader():
    import yaml

    class NoAliases(yaml.SafeLoader):
        """safe_load without aliases: ``*name`` references let a few hundred bytes expand into
        gigabytes (the "billion laughs"); nothing Navigator reads needs them."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.YAMLError(f"YAML aliases (*{event.anchor}) are not accepted "
                                     f"(line {event.start_mark.line + 1}); write the value out")
            return super().compose_node(parent, index)

    return NoAliases


def parse(text: str, source: str, *, aliases: bool = False):
    """The YAML document in ``text``; aliases (unless ``aliases``) and nesting deeper than Python's
    recursion limit are refused."""
    import yaml

    try:
        loader = (yaml.SafeLoader if aliases else _no_alias_loader())(text)
        try:          # what yaml.safe_load does, with the loader chosen here (a SafeLoader subclass)
            return loader.get_single_data()
        finally:
            loader.dispose()
    except RecursionError:
        raise UserInputError(f"{source}: nested too deeply to read") from None
    except yaml.YAMLError as e:
        raise UserInputError(f"{source}: not valid YAML ({str(e).splitlines()[0]})") from None
