"""Small text helpers shared by the agreement kinds: names, places, dates, lists and ordinals."""

from __future__ import annotations

import calendar
import random
import re
from datetime import date

MONTHS: tuple[str, ...] = tuple(calendar.month_name[1:])

FIRST_NAMES = (
    "Maria", "James", "Aisha", "Chen", "Olga", "Pedro", "Fatima", "Liam", "Noor", "Kenji",
    "Sofia", "David", "Amara", "Lucas", "Elena", "Omar", "Grace", "Ivan", "Priya", "Tomas",
)
LAST_NAMES = (
    "Lopez", "Smith", "Khan", "Wang", "Petrova", "Silva", "Haddad", "Murphy", "Okafor", "Tanaka",
    "Rossi", "Cohen", "Mensah", "Becker", "Novak", "Farah", "Walsh", "Ivanov", "Patel", "Berg",
)
COMPANY_WORDS = (
    "Northwind", "Bluepeak", "Cedar", "Harbor", "Summit", "Ironwood", "Brightline", "Kestrel",
    "Maple", "Quarry", "Silverleaf", "Tidewater", "Granite", "Lumen", "Orchard", "Pioneer",
)
COMPANY_SUFFIXES = ("Ltd", "LLC", "Inc", "GmbH", "Partners", "Group")
STREETS = (
    "Oak Street", "Elm Avenue", "River Road", "Hill Lane", "Park Place", "Mill Street",
    "Lake Drive", "Church Road", "Station Street", "Garden Court",
)


def person(rng: random.Random) -> str:
    """A generated person's full name."""
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def company(rng: random.Random) -> str:
    """A generated company name."""
    return f"{rng.choice(COMPANY_WORDS)} {rng.choice(COMPANY_SUFFIXES)}"


def address(rng: random.Random) -> str:
    """A generated street address."""
    return f"{rng.randint(2, 250)} {rng.choice(STREETS)}, Unit {rng.randint(1, 40)}"


def format_date(d: date) -> str:
    """Dates as in the documents: "March 3, 2025" (no leading zero)."""
    return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"


def last_day(year: int, month: int) -> int:
    """Number of days in the month."""
    return calendar.monthrange(year, month)[1]


def ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 11 -> "11th", 23 -> "23rd"."""
    if 10 <= n % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def join_and(items: list[str]) -> str:
    """["a"] -> "a"; ["a", "b"] -> "a and b"; ["a", "b", "c"] -> "a, b and c"."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def fix_plurals(line: str) -> str:
    """Singular after a lone 1: "within 1 days" -> "within 1 day"."""
    return re.sub(r"(?<![\d.,$])\b1 days\b", "1 day", line)
