"""Errors that are the user's to fix: the CLI prints them as one line, never a traceback."""


class UserError(Exception):
    """Bad input (unknown model, missing file, malformed line, endpoint down...).

    The message must name the offending input and, where possible, say what to do instead.
    """


def parse_yaml(text: str, source: str) -> object:
    """YAML text parsed, or one UserError naming ``source``, the line and the parser's first line of
    complaint (the sweep file, the reproduce config and the judge's prompt file read YAML alike)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise UserError(f"{source} is not YAML{where}: {str(exc).splitlines()[0]}") from None
