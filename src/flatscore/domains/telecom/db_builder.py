"""The generated telecom database: customers with 1-3 lines, a device per line, past bills.

Its names, places, phone models and plans are the fixed vocabulary the builder draws from,
with the one ``random.Random`` that :func:`~.generator.generate` seeds; editing an entry
changes the generated files for every seed.
"""

from __future__ import annotations

import datetime
import random

from .data_model import (
    AccountStatus,
    Address,
    Bill,
    BillStatus,
    Customer,
    Device,
    DeviceType,
    Line,
    LineItem,
    LineStatus,
    PaymentMethod,
    PaymentMethodType,
    Plan,
    TelecomDB,
)

_FIRST = [
    "Alice",
    "Brian",
    "Carmen",
    "David",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Keisha",
    "Liam",
    "Maya",
    "Nikhil",
    "Olga",
    "Pedro",
    "Quinn",
    "Rosa",
    "Samir",
    "Tara",
    "Umar",
    "Vera",
    "Wes",
    "Yara",
    "Zoe",
]
_LAST = [
    "Alvarez",
    "Brooks",
    "Chen",
    "Dubois",
    "Evans",
    "Fischer",
    "Garcia",
    "Hughes",
    "Ito",
    "Jensen",
    "Kowalski",
    "Lopez",
    "Moreau",
    "Nguyen",
    "Okafor",
    "Patel",
    "Rossi",
    "Silva",
    "Tanaka",
    "Usman",
    "Vargas",
    "Weber",
]
_STREETS = ["Maple Ave", "Cedar St", "Lake Rd", "Hill St", "Park Blvd", "Elm Ct", "Bay Dr", "Mill Ln"]
_CITIES = [
    ("Portland", "OR", "97201"),
    ("Madison", "WI", "53703"),
    ("Tucson", "AZ", "85701"),
    ("Raleigh", "NC", "27601"),
    ("Boise", "ID", "83702"),
    ("Albany", "NY", "12207"),
]
_PHONE_MODELS = [
    ("phone", "Nova 12"),
    ("phone", "Pixel 8"),
    ("phone", "Galaxy A54"),
    ("phone", "iPhone 15"),
    ("tablet", "Tab S9"),
    ("phone", "Moto G"),
]

_PLANS = [
    Plan(plan_id="P3001", name="Starter", data_limit_gb=4.0, price_per_month=35.0, data_refueling_price_per_gb=6.0),
    Plan(plan_id="P3002", name="Plus", data_limit_gb=10.0, price_per_month=50.0, data_refueling_price_per_gb=4.0),
    Plan(plan_id="P3003", name="Max", data_limit_gb=20.0, price_per_month=70.0, data_refueling_price_per_gb=2.5),
    Plan(
        plan_id="P3004", name="Family Pack", data_limit_gb=30.0, price_per_month=110.0, data_refueling_price_per_gb=3.0
    ),
    Plan(plan_id="P3005", name="Unlimited", data_limit_gb=999.0, price_per_month=90.0, data_refueling_price_per_gb=0.5),
]


def _date(rng: random.Random, start: datetime.date, span_days: int) -> datetime.date:
    return start + datetime.timedelta(days=rng.randrange(span_days))


#: First number of each id series: tau2-bench-like 4-digit ids, or 3-digit ones (one token of the
#: demo model's tokenizer, which cuts digit runs into threes), for experiments with small models.
ID_STARTS: dict[str, dict[str, int]] = {
    "tau2": {"customer": 5001, "line": 4001, "device": 6001, "bill": 7001},
    "short": {"customer": 501, "line": 401, "device": 601, "bill": 701},
}


def build_database(rng: random.Random, n_customers: int = 24, ids: str = "tau2") -> TelecomDB:
    """Customers with 1-3 lines each, a device per line, and a few past bills.

    ``ids`` names the :data:`ID_STARTS` series; both draw the same random stream.
    """
    if ids not in ID_STARTS:
        raise ValueError(f"ids: expected one of {sorted(ID_STARTS)}, got {ids!r}")
    first_id = ID_STARTS[ids]
    db = TelecomDB(plans=[p.model_copy() for p in _PLANS])
    names = rng.sample([(f, last) for f in _FIRST for last in _LAST], n_customers)
    numbers = rng.sample(range(2000000, 9999999), 3 * n_customers + 5)
    line_no, bill_no = first_id["line"], first_id["bill"]
    for index, (first, last) in enumerate(names):
        cid = f"C{first_id['customer'] + index}"
        lines: list[Line] = []
        for _ in range(rng.choice([1, 1, 2, 2, 3])):
            n = numbers.pop()
            phone = f"555-{n // 10000:03d}-{n % 10000:04d}"
            did = f"D{line_no - first_id['line'] + first_id['device']}"
            kind, model = rng.choice(_PHONE_MODELS)
            db.devices.append(
                Device(
                    device_id=did,
                    device_type=DeviceType(kind),
                    model=model,
                    imei=f"35{rng.randrange(10**12, 10**13)}",
                    is_esim_capable=rng.random() < 0.7,
                    activated=True,
                    activation_date=datetime.datetime.combine(
                        _date(rng, datetime.date(2024, 3, 1), 300), datetime.time(10, 0)
                    ),
                )
            )
            plan = rng.choice(_PLANS)
            suspended = rng.random() < 0.08
            line = Line(
                line_id=f"L{line_no}",
                phone_number=phone,
                status=LineStatus.SUSPENDED if suspended else LineStatus.ACTIVE,
                plan_id=plan.plan_id,
                device_id=did,
                data_used_gb=0.0 if suspended else round(rng.uniform(0.1, 0.8) * min(plan.data_limit_gb, 25.0), 1),
                data_refueling_gb=0.0,
                roaming_enabled=rng.random() < 0.4,
                contract_end_date=_date(rng, datetime.date(2025, 9, 1), 700),
                last_plan_change_date=_date(rng, datetime.date(2024, 6, 1), 200),
                suspension_start_date=datetime.date(2025, 2, 1) if suspended else None,
            )
            lines.append(line)
            db.lines.append(line)
            line_no += 1
        if all(line.status != LineStatus.ACTIVE for line in lines):
            lines[0].status, lines[0].suspension_start_date = LineStatus.ACTIVE, None
        street = f"{rng.randrange(10, 999)} {rng.choice(_STREETS)}"
        city, state, zip_code = rng.choice(_CITIES)
        customer = Customer(
            customer_id=cid,
            full_name=f"{first} {last}",
            date_of_birth=_date(rng, datetime.date(1955, 1, 1), 365 * 45).isoformat(),
            email=f"{first.lower()}.{last.lower()}@example.com",
            phone_number=lines[0].phone_number,
            address=Address(street=street, city=city, state=state, zip_code=zip_code),
            account_status=AccountStatus.ACTIVE,
            payment_methods=[
                PaymentMethod(
                    method_type=rng.choice(list(PaymentMethodType)),
                    account_number_last_4=f"{rng.randrange(10000):04d}",
                    expiration_date=f"{rng.randrange(1, 13):02d}/{rng.randrange(2026, 2030)}",
                )
            ],
            line_ids=[line.line_id for line in lines],
            created_at=datetime.datetime.combine(_date(rng, datetime.date(2023, 1, 1), 600), datetime.time(9, 30)),
            goodwill_credit_used_this_year=rng.choice([0.0, 0.0, 10.0, 25.0]),
        )
        monthly = sum(next(p for p in _PLANS if p.plan_id == line.plan_id).price_per_month for line in lines)
        for month, status in ((1, BillStatus.PAID), (2, BillStatus.ISSUED)):
            bid = f"B{bill_no}"
            bill_no += 1
            start = datetime.date(2025, month, 1)
            db.bills.append(
                Bill(
                    bill_id=bid,
                    customer_id=cid,
                    period_start=start,
                    period_end=(start + datetime.timedelta(days=32)).replace(day=1) - datetime.timedelta(days=1),
                    issue_date=start + datetime.timedelta(days=4),
                    total_due=monthly,
                    due_date=start + datetime.timedelta(days=18),
                    status=status,
                    line_items=[
                        LineItem(
                            description=f"{next(p for p in _PLANS if p.plan_id == ln.plan_id).name} - Line {ln.phone_number}",
                            amount=next(p for p in _PLANS if p.plan_id == ln.plan_id).price_per_month,
                            date=start + datetime.timedelta(days=4),
                            item_type="Plan Charge",
                        )
                        for ln in lines
                    ],
                )
            )
            customer.bill_ids.append(bid)
        db.customers.append(customer)
    return db
