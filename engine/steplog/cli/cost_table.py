"""``steplog cost``'s table: one line per group, widest key first column, totals last."""

from __future__ import annotations

from steplog.log.cost import CostRow


def _tokens(n: int) -> str:
    return f"{n:,}"


def _usd(x: float) -> str:
    return f"${x:,.4f}" if x < 1 else f"${x:,.2f}"


def cost_lines(rows: list[CostRow], by: str) -> list[str]:
    """The rows as aligned text, a total line under them; one line if there is nothing."""
    if not rows:
        return ["no spending recorded in this window"]
    head = by if not by.startswith("tag:") else by[4:]
    total = CostRow("total", run_ids=set().union(*(r.run_ids for r in rows)))
    for r in rows:
        total.tokens += r.tokens
        total.estimated_tokens += r.estimated_tokens
        total.cost_usd += r.cost_usd
        total.steps += r.steps
    width = max(len(head), len("total"), *(len(r.key) for r in rows))
    cells = [(r.key, _tokens(r.tokens), _usd(r.cost_usd), str(r.runs), str(r.steps)) for r in rows]
    foot = (
        "total",
        _tokens(total.tokens),
        _usd(total.cost_usd),
        str(total.runs),
        str(total.steps),
    )
    header = (head, "tokens", "cost", "runs", "steps")
    widths = [width] + [max(len(c[i]) for c in [*cells, foot, header]) for i in range(1, 5)]

    def line(c: tuple[str, ...]) -> str:
        return "  ".join(
            [c[0].ljust(widths[0])] + [c[i].rjust(widths[i]) for i in range(1, 5)]
        ).rstrip()

    out = [line(header), *(line(c) for c in cells)]
    if len(rows) > 1:
        out.append(line(foot))
    if total.estimated_tokens:
        out.append(
            f"({_tokens(total.estimated_tokens)} of the tokens are steplog's estimates: the model "
            "reported no usage)"
        )
    return out
