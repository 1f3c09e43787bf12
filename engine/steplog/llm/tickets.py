"""The scripted model's rules: a support ticket read out of a message, classified with keyword
rules, answered from per-category reply templates (``OfflineModel`` in ``offline`` asks them).

Its answers are a pure function of the text (no clock, no randomness, no ``hash()`` of strings),
so a run interrupted and resumed produces byte-identical output to one that ran straight through.
Apart from ``OfflineModel`` so that an engine, which makes one for every run, does not compile
these rules until a step asks the model something.

The ticket format understood (anywhere in the last user message)::

    Ticket T-1001 from Dana Whitfield
    Subject: Charged twice for the Pro plan this month

    <body: one or more paragraphs>

    <optional instruction; the first line that reads like one ends the body, see _is_instruction>

For such a message the answer is ``{"category": ..., "priority": ..., "reply": ...}`` as JSON text.
Any other message gets a short plain-text digest of its input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

CATEGORIES = (
    "billing",
    "bug",
    "account",
    "feature_request",
    "privacy",
    "outage",
    "praise",
    "other",
)
"""Every category the scripted model can answer."""

PRIORITIES = ("urgent", "high", "normal", "low")

SIGNATURE = (
    "— Support team\n"
    "(Draft written offline by steplog's scripted model from keyword rules; please review before "
    "sending.)"
)

_HEADER = re.compile(
    r"Ticket\s+(?P<id>[A-Za-z]+-\d+)\s+from\s+(?P<customer>[^\n]+?)\s*\n"
    r"Subject:[ \t]*(?P<subject>[^\n]*?)[ \t]*(?:\n|$)",
    re.IGNORECASE,
)
# A line that reads like the agent's instruction rather than the customer's words (which may well
# mention JSON: "a simple JSON payload would be enough for us").
_INSTRUCTION = re.compile(
    r"^(?:please\s+)?(?:answer|respond|classify|categori[sz]e|triage"
    r"|reply (?:in|with|only)|return only)\b"
    r"|\b(?:answer|respond|reply|output|return)\b.*\bjson\b"
    r"|\bjson\b.*\b(?:keys?|fields?|schema|object)\b",
    re.IGNORECASE,
)

# (pattern, weight) per category; a pattern found in the subject counts twice.
_RULES: dict[str, tuple[tuple[str, int], ...]] = {
    "outage": (
        (r"\bdown\b", 2),
        (r"\boutage\b", 3),
        (r"\b50[234]\b", 2),
        (r"\bstatus page\b", 1),
        (r"\bnot loading\b|\bwon't load\b|\bunreachable\b|\bcan't reach\b", 2),
        (r"\beveryone\b|\bwhole team\b|\bnone of our\b|\bnothing is going out\b", 1),
        (r"\bstuck\b", 1),
        (r"\bsince (?:this morning|around|\d)", 1),
    ),
    "privacy": (
        (r"\bgdpr\b|\bccpa\b", 3),
        (r"\bpersonal data\b|\bdata protection\b|\bprivacy\b", 2),
        (r"\berasure\b|\bdeletion\b|\bdelete my (?:data|account)\b", 2),
        (r"\bexport\b", 2),
        (r"\bretention\b|\bhow long you keep\b|\bkeep our data\b", 1),
        (r"\barticle \d+\b|\bdpa\b", 1),
    ),
    "account": (
        (r"\blog ?in\b|\bsign ?in\b", 2),
        (r"\bpassword\b", 2),
        (r"\b2fa\b|\btwo[- ]factor\b", 2),
        (r"\blocked out\b", 3),
        (r"\bbackup codes?\b|\breset\b|\bsso\b", 1),
    ),
    "billing": (
        (r"\bcharged?\b|\bcharges\b", 2),
        (r"\brefund", 2),
        (r"\bbilled\b|\bbilling\b", 2),
        (r"\bsubscription\b|\bplan\b|\bdowngrad|\bupgrad|\bprorat", 1),
        (r"\breceipts?\b|\bvat\b", 2),
        (r"\bdiscount\b|\bpricing\b|\bfree tier\b", 2),
        (r"\bcredit card\b|\bpayment method\b", 1),
    ),
    "bug": (
        (r"\bbug\b", 3),
        (r"\berror\b|\binvalid\b", 2),
        (r"\bfails?\b|\bfailing\b|\bbroken\b|\bcrash", 2),
        (r"\bwrong\b|\bincorrect\b|\boff by\b|\brounding\b|\b(?:in)?consistent\b", 1),
        (r"\bwho (?:already )?paid\b|\balready paid\b", 2),
        (r"\bfix(?:ed)?\b", 1),
    ),
    "feature_request": (
        (r"\bfeature\b", 2),
        (r"\bwould be great\b|\bwould love\b|\bit would be nice\b", 2),
        (r"\bcould you add\b|\bplease add\b|\bcan you add\b", 2),
        (r"\broadmap\b|\bbeta\b|\bsuggest", 1),
        (r"\bwebhooks?\b|\bintegration\b|\bapi\b", 1),
    ),
    "praise": (
        (r"\bjust wanted to say\b", 2),
        (r"\bbrilliant\b|\bamazing\b|\bawesome\b|\bfantastic\b", 2),
        (r"\bgreat job\b|\bwell done\b|\bkudos\b", 2),
        (r"\bsaved (?:me|us)\b", 1),
        (r"\blove (?:the|it|your)\b|\bthank you for (?:the|your)\b", 1),
    ),
}
# Equal scores go to the category that needs the quicker human look.
_TIE_ORDER = {
    name: i
    for i, name in enumerate(
        ("outage", "privacy", "account", "billing", "bug", "feature_request", "praise")
    )
}

_URGENT = re.compile(r"(?<!not )\burgent\b|\basap\b|\bimmediately\b|\bemergency\b", re.IGNORECASE)
_NOT_URGENT = re.compile(r"\bnot urgent\b|\bno rush\b|\bwhenever you\b", re.IGNORECASE)
_ANGRY = re.compile(
    r"unacceptable|ridiculous|furious|embarrassing|annoyed|frankly|sloppy|second time|worst|!!",
    re.IGNORECASE,
)
_CONFUSED = re.compile(
    r"\bnot sure\b|\bconfus|\bdoing something wrong\b|\bdon't understand\b", re.IGNORECASE
)
_LEGAL = re.compile(r"\bgdpr\b|\bccpa\b|\bstatutory\b|\barticle \d+\b", re.IGNORECASE)
_PRICING_QUESTION = r"discount|nonprofit|free tier|pricing"
_CHARGE = r"charged|refund|billed|twice"
_AMOUNT = re.compile(r"[$€£]\s?\d[\d,]*(?:\.\d{2})?")
_INVOICE_REF = re.compile(r"\bINV-\d+\b")
_HTTP_CODE = re.compile(r"\b(5\d\d|4\d\d)\b")


@dataclass(frozen=True)
class Ticket:
    """A support ticket as parsed out of a chat message."""

    id: str
    customer: str
    subject: str
    body: str


def parse_ticket(text: str) -> Ticket | None:
    """The ticket in ``text`` (see the module docstring for the format), or None."""
    match = _HEADER.search(text)
    if match is None:
        return None
    lines: list[str] = []
    for line in text[match.end() :].splitlines():
        if _is_instruction(line.strip()):
            break
        lines.append(line.strip())
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return Ticket(match["id"], match["customer"].strip(), match["subject"].strip(), body)


def _is_instruction(line: str) -> bool:
    """True for a line of instructions: imperative triage wording, a JSON spec, or a list of
    categories."""
    if _INSTRUCTION.search(line):
        return True
    return sum(1 for name in CATEGORIES if re.search(rf"\b{name}\b", line, re.IGNORECASE)) >= 3


def classify(ticket: Ticket) -> tuple[str, str]:
    """``(category, priority)`` for a ticket, from keyword rules only."""
    subject, body = ticket.subject.lower(), ticket.body.lower()
    scores: dict[str, int] = {}
    for category, rules in _RULES.items():
        score = 0
        for pattern, weight in rules:
            score += weight * (
                2 * bool(re.search(pattern, subject)) + bool(re.search(pattern, body))
            )
        scores[category] = score
    best = min(scores, key=lambda c: (-scores[c], _TIE_ORDER[c]))
    category = best if scores[best] > 0 else "other"
    return category, _priority(category, f"{ticket.subject}\n{ticket.body}")


def _priority(category: str, text: str) -> str:
    if category == "outage" or _URGENT.search(text):
        return "urgent"
    if _ANGRY.search(text) or text.count("!") >= 3:
        return "high"
    if category == "privacy" and _LEGAL.search(text):
        return "high"
    if category == "account" and re.search(r"\blocked out\b", text, re.IGNORECASE):
        return "high"
    if category in ("praise", "feature_request") or _NOT_URGENT.search(text):
        return "low"
    return "normal"


def draft_reply(ticket: Ticket, category: str, priority: str) -> str:
    """A 3-6 sentence reply draft, greeting the customer by first name and naming the subject."""
    found = _Found.of(f"{ticket.subject}\n{ticket.body}")
    opener = _OPENERS[category]
    if category == "billing" and found.pricing_question:
        opener = (
            'Thank you for asking about "{subject}"; I am happy to help you find the right plan.'
        )
    sentences = [
        opener.format(subject=ticket.subject or "your message"),
        *_MIDDLES[category](found),
    ]
    if category != "praise" and priority in ("urgent", "high") and _ANGRY.search(found.text):
        sentences.append("I understand how frustrating this is, and I am sorry we let you down.")
    elif _CONFUSED.search(found.text):
        sentences.append("You have not done anything wrong; this is easy to sort out together.")
    if category != "praise":
        sentences.append(_CLOSERS[priority])
    return f"Hi {_first_name(ticket.customer)},\n\n{' '.join(sentences)}\n\n{SIGNATURE}"


@dataclass(frozen=True)
class _Found:
    """A ticket's text and the details the templates quote from it."""

    text: str
    low: str
    amount: str | None
    invoice: str | None
    http_code: str | None

    @classmethod
    def of(cls, text: str) -> _Found:
        amount, invoice, code = (
            _AMOUNT.search(text),
            _INVOICE_REF.search(text),
            _HTTP_CODE.search(text),
        )
        return cls(
            text,
            text.lower(),
            amount and amount.group(0),
            invoice and invoice.group(0),
            code and code.group(1),
        )

    def has(self, pattern: str) -> bool:
        return re.search(pattern, self.low) is not None

    @property
    def pricing_question(self) -> bool:
        return self.has(_PRICING_QUESTION) and not self.has(_CHARGE)


_OPENERS = {
    "billing": (
        'Thank you for getting in touch about "{subject}", and I am sorry for the trouble with '
        "your billing."
    ),
    "bug": (
        'Thank you for reporting "{subject}" so clearly; the detail you gave makes it much easier '
        "to reproduce."
    ),
    "account": (
        'Sorry to hear about the trouble with "{subject}"; let us get you back into your account.'
    ),
    "feature_request": (
        'Thank you for the suggestion about "{subject}"; requests like this shape what we build '
        "next."
    ),
    "privacy": (
        'Thank you for your request about "{subject}"; we handle data protection requests '
        "carefully and within the legal deadlines."
    ),
    "outage": (
        'Thank you for reporting this, and I am sorry: we know that "{subject}" is stopping your '
        "work."
    ),
    "praise": 'Thank you so much for your kind message about "{subject}"!',
    "other": 'Thank you for getting in touch about "{subject}".',
}

_CLOSERS = {
    "urgent": "Because this is urgent, it has been escalated to our on-call team "
    "and we will update you within the hour.",
    "high": (
        "We have marked this as high priority and will get back to you within one business day."
    ),
    "normal": "We will get back to you within two business days.",
    "low": "We will keep you posted on any progress.",
}


def _billing(f: _Found) -> list[str]:
    if f.pricing_question:
        return [
            "I have asked our billing team which plans and discounts apply to your situation.",
            "They will reply with the options and what each would cost you per month.",
        ]
    if f.amount:
        first = (
            f"I have asked our billing team to check the {f.amount} charge against your payment "
            "history right away."
        )
    else:
        first = (
            "I have asked our billing team to review the charges and receipts on your account "
            "right away."
        )
    if f.has(r"refund|twice|prorat|downgrad"):
        second = (
            "Any amount billed in error will be refunded to your original payment method, "
            "and you will receive a corrected receipt."
        )
    elif f.has(r"receipt|\bvat\b"):
        second = (
            "We will reissue the affected receipts with the details you need, "
            "so your accountant can use them as they are."
        )
    else:
        second = "We will explain every line of the charge and correct anything that is wrong."
    return [first, second]


def _bug(f: _Found) -> list[str]:
    reference = f" (reference {f.invoice})" if f.invoice else ""
    first = (
        f"I have filed it with our engineering team as a bug{reference}, and they will start by "
        "reproducing it."
    )
    if f.has(r"turn (?:this|it) off|disable|stop (?:sending|this)"):
        return [
            first,
            "In the meantime we can pause the affected feature on your account if you would like; "
            "just reply to confirm.",
        ]
    return [
        first,
        "If you can send a screenshot or the exact steps that trigger it, "
        "that will help us confirm the fix.",
    ]


def _account(f: _Found) -> list[str]:
    if f.has(r"2fa|two[- ]factor|backup code"):
        first = (
            "Because your two-factor device is no longer available, we will verify your identity "
            "through the email address on file and then reset two-factor authentication for you."
        )
    else:
        first = (
            'Please try the "Forgot password" link on the sign-in page, which sends a reset link '
            "to the email address we have on file."
        )
    if f.has(r"email") and f.has(r"chang"):
        second = (
            "If the reset email does not arrive, reply with both your old and new addresses and we "
            "will check which one the account uses."
        )
    else:
        second = (
            "For your security we never change login details over email without that verification "
            "step."
        )
    return [first, second]


def _feature_request(f: _Found) -> list[str]:
    first = (
        "I have logged it with our product team together with your description of how you would "
        "use it."
    )
    if f.has(r"\bbeta\b"):
        return [
            first,
            "We have also noted that you are happy to test a beta, and we will reach out if one "
            "becomes available.",
        ]
    return [
        first,
        "I cannot promise a date yet, but we will let you know if it makes it onto the roadmap.",
    ]


def _privacy(f: _Found) -> list[str]:
    parts = []
    if f.has(r"erasure|delet|erase"):
        parts.append(
            "Once we have verified that the request comes from you, we will erase the personal "
            "data we hold about you and confirm in writing when it is done."
        )
    if f.has(r"export"):
        parts.append(
            "We will prepare a complete export of your account data in CSV format and send you a "
            "secure download link."
        )
    if f.has(r"retention|how long|keep (?:our|your|my) data"):
        parts.append(
            "We will also send you our data retention schedule, which explains how long each kind "
            "of record is kept after an account is closed."
        )
    if len(parts) < 2:
        parts.append(
            "You can reply to this email at any time to ask how your request is progressing."
        )
    return parts


def _outage(f: _Found) -> list[str]:
    errors = f"the {f.http_code} errors" if f.http_code else "this"
    first = f"Our engineers are treating {errors} as an incident and are investigating now."
    if f.has(r"status page"):
        return [
            first,
            "I am sorry our status page did not reflect the problem; we are updating it now.",
        ]
    return [first, "We will post updates on our status page as we learn more."]


def _praise(f: _Found) -> list[str]:
    return [
        "I have shared it with the team who built the feature, and it genuinely made their day.",
        "If there is ever anything we could do better, just reply to this email.",
    ]


def _other(f: _Found) -> list[str]:
    return [
        "I have passed your question to the right person on our team, and they will follow up "
        "with a full answer.",
        "If you can share any extra details in the meantime, just reply to this email.",
    ]


_MIDDLES: dict[str, Callable[[_Found], list[str]]] = {
    "billing": _billing,
    "bug": _bug,
    "account": _account,
    "feature_request": _feature_request,
    "privacy": _privacy,
    "outage": _outage,
    "praise": _praise,
    "other": _other,
}
"""Per category: two or three sentences built from details found in the ticket."""


def _first_name(customer: str) -> str:
    name = customer.split("(", 1)[0].strip()
    first = name.split()[0] if name.split() else ""
    return first if first and "@" not in first else "there"


def answer_ticket(ticket: Ticket) -> str:
    """The scripted model's JSON answer for one ticket."""
    category, priority = classify(ticket)
    reply = draft_reply(ticket, category, priority)
    return json.dumps(
        {"category": category, "priority": priority, "reply": reply}, ensure_ascii=False
    )


def digest(text: str) -> str:
    """A short plain-text summary of a non-ticket request: ticket ids, category and priority
    counts."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tagged = [(m.group(0), line) for line in lines if (m := re.search(r"\b[A-Z]+-\d+\b", line))]
    head = "Digest written offline by steplog's scripted model"
    if not tagged:
        words = len(text.split())
        first = re.split(r"(?<=[.!?])\s", lines[0], maxsplit=1)[0] if lines else ""
        size = f"{_plural(len(lines), 'line')} and {_plural(words, 'word')}"
        return f'{head}: the message has {size}. It begins: "{first[:160]}".'
    ids = list(dict.fromkeys(ticket_id for ticket_id, _ in tagged))
    parts = [f"{head}: {_plural(len(ids), 'ticket')} ({ids[0]} to {ids[-1]})."]
    for label, names in (("By category", CATEGORIES), ("By priority", PRIORITIES)):
        counts = {name: 0 for name in names}
        for _, line in tagged:
            found = [name for name in names if re.search(rf"\b{name}\b", line.lower())]
            if found:
                counts[found[0]] += 1
        shown = ", ".join(f"{name} {n}" for name, n in counts.items() if n)
        if shown:
            parts.append(f"{label}: {shown}.")
    return " ".join(parts)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
