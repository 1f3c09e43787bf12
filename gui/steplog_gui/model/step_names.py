"""Step names of one run, held as columns: ``seq -> (name, kind)`` without an object per step;
Qt-free.

A million-step run's names as a dict of tuples cost the monitor 230 MB; here they are one
string and a few numpy arrays (about 35 MB), read back one name at a time when the hover, the
step detail or the filter asks. Names the fold adds live (a few per commit) go to a small dict
on top, which wins over the columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, MutableMapping

import numpy as np
import numpy.typing as npt

from steplog.log.reader import NAME_SEPARATOR, NameColumns

Seqs = npt.NDArray[np.int64]


class StepNames(MutableMapping[int, tuple[str, str]]):
    """``seq -> (name, kind)``: the bulk-loaded columns, then what was set since."""

    def __init__(self, columns: NameColumns | None = None) -> None:
        self._live: dict[int, tuple[str, str]] = {}
        self._lower: str | None = None
        if columns is None or not len(columns.seq):
            self._seq = np.zeros(0, np.int64)
            self._start = self._length = self._seq
            self._kind = np.zeros(0, np.int16)
            self._kinds: tuple[str, ...] = ()
            self._text = ""
            return
        start = np.zeros(len(columns.length), dtype=np.int64)
        np.cumsum(columns.length[:-1] + len(NAME_SEPARATOR), out=start[1:])
        if bool(np.all(columns.seq[1:] > columns.seq[:-1])):  # each step named once, in order
            self._seq, self._start, self._length = columns.seq, start, columns.length
            self._kind, self._kinds = columns.kind, columns.kinds
        else:  # the last of each step's names, by step (np.unique keeps the first: reversed)
            seq, first = np.unique(columns.seq[::-1], return_index=True)
            last = len(columns.seq) - 1 - first
            self._seq = seq
            self._start, self._length = start[last], columns.length[last]
            self._kind, self._kinds = columns.kind[last], columns.kinds
        self._text = columns.text

    # -- Mapping ----------------------------------------------------------------------------

    def _at(self, seq: int) -> int:
        i = int(np.searchsorted(self._seq, seq))
        return i if i < len(self._seq) and self._seq[i] == seq else -1

    def __getitem__(self, seq: int) -> tuple[str, str]:
        live = self._live.get(seq)
        if live is not None:
            return live
        i = self._at(seq)
        if i < 0:
            raise KeyError(seq)
        start = int(self._start[i])
        return self._text[start : start + int(self._length[i])], self._kinds[int(self._kind[i])]

    def __setitem__(self, seq: int, value: tuple[str, str]) -> None:
        self._live[seq] = value

    def __delitem__(self, seq: int) -> None:
        raise TypeError("step names are never removed")

    def __contains__(self, seq: object) -> bool:
        return seq in self._live or (isinstance(seq, int) and self._at(seq) >= 0)

    def __iter__(self) -> Iterator[int]:
        live = self._live
        for seq in self._seq.tolist():
            if seq not in live:
                yield seq
        yield from live

    def __len__(self) -> int:
        if not self._live:
            return len(self._seq)
        live = np.fromiter(self._live, dtype=np.int64, count=len(self._live))
        return len(self._seq) + int(np.count_nonzero(~np.isin(live, self._seq)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StepNames({len(self)} steps)"

    # -- search -----------------------------------------------------------------------------

    def matching(self, text: str) -> Seqs:
        """The steps whose name contains ``text`` (case-insensitive), ascending: a search of the
        one string for the columns, name by name for the few set since."""
        needle = text.lower()
        found: list[int] = [seq for seq, (name, _) in self._live.items() if needle in name.lower()]
        if len(self._seq):
            found_cols = self._search(needle)
            live = np.fromiter(self._live, dtype=np.int64, count=len(self._live))
            found_cols = found_cols[~np.isin(found_cols, live)]
            found.extend(found_cols.tolist())
        return np.unique(np.array(found, dtype=np.int64))

    def _search(self, needle: str) -> Seqs:
        if not needle:
            return self._seq
        if self._lower is None:
            self._lower = self._text.lower()
        low = self._lower
        if NAME_SEPARATOR in needle or len(low) != len(self._text):
            # A needle that could span two names, or lowercase that moved the offsets (a few
            # letters lower to two characters): name by name.
            hits = [
                i for i in range(len(self._seq)) if needle in self[int(self._seq[i])][0].lower()
            ]
            return self._seq[np.array(hits, dtype=np.int64)]
        order = np.argsort(self._start, kind="stable")
        starts = self._start[order]
        at = np.fromiter((m.start() for m in re.finditer(re.escape(needle), low)), dtype=np.int64)
        if not len(at):
            return np.zeros(0, np.int64)
        name = order[np.searchsorted(starts, at, side="right") - 1]
        inside = at + len(needle) <= self._start[name] + self._length[name]
        return np.unique(self._seq[name[inside]])
