"""The readers' reads of JSON inside ``event.data``, in SQL for each log backend (its ``json``).

Everything else the monitor reads is portable SQL. JSON is not: SQLite has ``json_extract`` and
``json_valid`` (not ``->>``, which needs SQLite 3.38; Ubuntu 22.04's Python links 3.37), and
PostgreSQL has ``jsonb`` operators. ``data`` is ``TEXT`` on both. A row whose ``data`` is not a
JSON object (hand-edited) reads as no fields on both: SQLite's ``json_valid``, and on PostgreSQL a
cast only of text that starts as an object does (the engine writes ``json.dumps`` of a dict, and
the event table refuses updates).

Values are read as SQLite's ``CAST`` reads them: a JSON ``true`` is 1, a missing field ``NULL``.
"""

from __future__ import annotations


class JsonSql:
    """SQLite's forms (the default)."""

    valid = "json_valid(data)"
    """True for a row whose ``data`` can be read as JSON."""

    def number(self, path: str, sql_type: str) -> str:
        """The field at ``path`` (``"usage.steps"``) as ``INTEGER``/``REAL``, ``NULL`` if absent."""
        return f"CAST(json_extract(data, '$.{path}') AS {sql_type})"

    def text(self, path: str) -> str:
        return f"json_extract(data, '$.{path}')"

    def is_object(self, path: str) -> str:
        return f"json_type(data, '$.{path}') = 'object'"

    def object_text(self, path: str) -> str:
        """The object at ``path`` as JSON text (for ``logread.payload``)."""
        return f"json_extract(data, '$.{path}')"


class PgJsonSql(JsonSql):
    """PostgreSQL's forms: ``data::jsonb`` and its operators, guarded as the module says."""

    _doc = "(CASE WHEN left(ltrim(data), 1) = '{' THEN data::jsonb END)"
    valid = f"{_doc} IS NOT NULL"

    def _at(self, path: str) -> str:
        return f"({self._doc} #> '{{{','.join(path.split('.'))}}}')"

    def number(self, path: str, sql_type: str) -> str:
        at = self._at(path)
        cast = {"INTEGER": "bigint", "REAL": "double precision"}[sql_type]
        number = (
            f"({at} #>> '{{}}')::numeric"
            if cast == "bigint"
            else f"({at} #>> '{{}}')::double precision"
        )
        return (
            f"(CASE jsonb_typeof({at}) WHEN 'number' THEN {number}::{cast} WHEN 'boolean' THEN "
            f"CASE WHEN {at} = 'true'::jsonb THEN 1 ELSE 0 END END)"
        )

    def text(self, path: str) -> str:
        return f"({self._at(path)} #>> '{{}}')"

    def is_object(self, path: str) -> str:
        return f"jsonb_typeof({self._at(path)}) = 'object'"

    def object_text(self, path: str) -> str:
        return f"({self._at(path)})::text"
