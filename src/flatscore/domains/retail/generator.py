"""Seeded synthetic retail data in tau2-bench's layout: db.json, policy.md, tasks.json, split_tasks.json.

All randomness comes from one ``random.Random(seed)``; nothing reads the clock or global state,
so a seed always gives byte-identical files. Every task's ground-truth actions are replayed
through :class:`RetailTools` on a fresh copy of the generated database before the task is kept:
a candidate whose replay raises, or whose mutating call leaves the database unchanged, is
dropped and another one drawn.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from ..toolkit import ToolError, render_result
from .data_model import (
    CreditCard,
    GiftCard,
    Order,
    OrderFullfilment,
    OrderItem,
    OrderPayment,
    Paypal,
    Product,
    RetailDB,
    User,
    UserAddress,
    UserName,
    Variant,
)
from .tools import RetailTools

N_USERS = 60
N_ORDERS = 150

# name -> (base price, {option: values})
CATALOGUE: dict[str, tuple[float, dict[str, list[str]]]] = {
    "T-Shirt": (
        35.0,
        {
            "color": ["black", "white", "blue", "red"],
            "size": ["S", "M", "L", "XL"],
            "material": ["cotton", "polyester"],
        },
    ),
    "Running Shoes": (
        120.0,
        {"size": ["8", "9", "10", "11"], "color": ["black", "white", "yellow"], "material": ["mesh", "leather"]},
    ),
    "Desk Lamp": (
        80.0,
        {
            "color": ["black", "silver", "white"],
            "brightness": ["low", "medium", "high"],
            "power source": ["USB", "AC adapter"],
        },
    ),
    "Water Bottle": (
        30.0,
        {
            "capacity": ["500ml", "750ml", "1000ml"],
            "material": ["glass", "stainless steel", "plastic"],
            "color": ["blue", "green", "black"],
        },
    ),
    "Backpack": (
        150.0,
        {"color": ["black", "grey", "navy"], "size": ["small", "medium", "large"], "compartment": ["laptop", "hiking"]},
    ),
    "Mechanical Keyboard": (
        180.0,
        {
            "switch type": ["linear", "tactile", "clicky"],
            "backlight": ["none", "white", "RGB"],
            "size": ["full size", "80%"],
        },
    ),
    "Wireless Earbuds": (
        140.0,
        {
            "color": ["black", "white", "blue"],
            "battery life": ["6 hours", "8 hours"],
            "water resistance": ["IPX4", "IPX7"],
        },
    ),
    "Office Chair": (
        420.0,
        {"material": ["mesh", "fabric", "leather"], "color": ["black", "grey"], "armrest": ["fixed", "adjustable"]},
    ),
    "Coffee Maker": (
        160.0,
        {
            "color": ["black", "stainless steel"],
            "capacity": ["4 cups", "8 cups", "12 cups"],
            "type": ["drip", "espresso"],
        },
    ),
    "Yoga Mat": (
        45.0,
        {
            "thickness": ["4mm", "6mm", "8mm"],
            "material": ["PVC", "natural rubber", "TPE"],
            "color": ["purple", "green", "pink"],
        },
    ),
    "Smart Watch": (
        260.0,
        {
            "color": ["black", "silver", "gold"],
            "band material": ["silicone", "leather", "metal"],
            "display": ["LCD", "AMOLED"],
        },
    ),
    "Bluetooth Speaker": (
        95.0,
        {
            "color": ["red", "blue", "black"],
            "battery life": ["10 hours", "20 hours"],
            "water resistance": ["yes", "no"],
        },
    ),
    "Electric Kettle": (
        60.0,
        {
            "capacity": ["1L", "1.5L", "2L"],
            "material": ["glass", "plastic", "stainless steel"],
            "color": ["white", "black", "silver"],
        },
    ),
    "Sunglasses": (
        110.0,
        {
            "frame color": ["black", "brown", "silver"],
            "lens color": ["green", "brown", "blue"],
            "polarized": ["yes", "no"],
        },
    ),
    "Hiking Boots": (
        190.0,
        {"size": ["8", "9", "10", "11", "12"], "material": ["leather", "synthetic"], "waterproof": ["yes", "no"]},
    ),
    "Digital Camera": (
        640.0,
        {"resolution": ["20MP", "24MP", "30MP"], "zoom": ["3x", "5x", "10x"], "storage": ["SD card", "CF card"]},
    ),
    "Tablet": (
        420.0,
        {
            "screen size": ["8-inch", "10-inch", "12-inch"],
            "storage": ["64GB", "128GB", "256GB"],
            "color": ["black", "silver", "gold"],
        },
    ),
    "Skateboard": (
        130.0,
        {
            "deck material": ["maple", "bamboo", "plastic"],
            "length": ["28 inch", "31 inch", "34 inch"],
            "design": ["plain", "graphic"],
        },
    ),
    "Air Purifier": (
        280.0,
        {
            "room size": ["small", "medium", "large"],
            "filter type": ["HEPA", "carbon"],
            "features": ["quiet operation", "night mode", "smart sensors"],
        },
    ),
    "Garden Hose": (
        55.0,
        {
            "length": ["25ft", "50ft", "100ft"],
            "material": ["rubber", "vinyl", "latex"],
            "color": ["green", "blue", "black"],
        },
    ),
}

FIRST_NAMES = [
    "Ava",
    "Liam",
    "Mia",
    "Noah",
    "Emma",
    "Ethan",
    "Sofia",
    "Lucas",
    "Amelia",
    "Mason",
    "Harper",
    "Omar",
    "Yara",
    "Daiki",
    "Priya",
    "Mateo",
    "Chloe",
    "Ivan",
    "Fatima",
    "Hiro",
    "Lena",
    "Raj",
    "Nora",
    "Diego",
    "Zoe",
    "Aarav",
    "Grace",
    "Kofi",
    "Isla",
    "Jonas",
]
LAST_NAMES = [
    "Garcia",
    "Smith",
    "Nguyen",
    "Patel",
    "Kim",
    "Muller",
    "Rossi",
    "Khan",
    "Silva",
    "Johnson",
    "Lopez",
    "Brown",
    "Ito",
    "Moreau",
    "Ahmed",
    "Kowalski",
    "Santos",
    "Andersen",
    "Okafor",
    "Levi",
    "Chen",
    "Davis",
    "Fischer",
    "Wilson",
    "Sato",
]
STREETS = [
    "Oak Street",
    "Maple Drive",
    "Cedar Avenue",
    "Pine Lane",
    "Elm Street",
    "River Road",
    "Hillcrest Drive",
    "Lakeview Drive",
    "Sunset Boulevard",
    "Park Avenue",
    "Willow Lane",
    "Broadway",
    "Main Street",
    "Highland Avenue",
    "Spruce Street",
    "Chestnut Street",
]
CITIES = [
    ("Seattle", "WA", "981"),
    ("Austin", "TX", "787"),
    ("Denver", "CO", "802"),
    ("Boston", "MA", "021"),
    ("Chicago", "IL", "606"),
    ("Phoenix", "AZ", "850"),
    ("Portland", "OR", "972"),
    ("Columbus", "OH", "432"),
    ("San Diego", "CA", "921"),
    ("Miami", "FL", "331"),
    ("New York", "NY", "100"),
    ("Nashville", "TN", "372"),
]
BRANDS = ["visa", "mastercard"]
PERSONAS = [
    "You are polite and patient.",
    "You are in a hurry and want this done quickly.",
    "You are detail-oriented and check every number the agent gives you.",
    "You are friendly but a bit vague at first; give details when asked.",
    "You are direct and do not like small talk.",
]


# ------------------------------------------------------------------------------------------
# world
# ------------------------------------------------------------------------------------------
class _Ids:
    """Unique random digit strings."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def digits(self, n: int, prefix: str = "") -> str:
        while True:
            value = prefix + "".join(str(self.rng.randrange(10)) for _ in range(n))
            if value[len(prefix)] != "0" and value not in self.used:
                self.used.add(value)
                return value


def _address(rng: random.Random) -> UserAddress:
    city, state, zip_prefix = rng.choice(CITIES)
    return UserAddress(
        address1=f"{rng.randint(10, 999)} {rng.choice(STREETS)}",
        address2=rng.choice(["", f"Suite {rng.randint(100, 999)}", f"Apt {rng.randint(1, 40)}"]),
        city=city,
        country="USA",
        state=state,
        zip=f"{zip_prefix}{rng.randint(0, 99):02d}",
    )


def _products(rng: random.Random, ids: _Ids) -> dict[str, Product]:
    products: dict[str, Product] = {}
    for name, (base, dims) in CATALOGUE.items():
        combos = [{}]
        for option, values in dims.items():
            combos = [dict(c, **{option: v}) for c in combos for v in values]
        rng.shuffle(combos)
        chosen = combos[: rng.randint(5, min(9, len(combos)))]
        variants: dict[str, Variant] = {}
        for i, options in enumerate(chosen):
            item_id = ids.digits(10)
            price = round(base * rng.uniform(0.8, 1.25), 2)
            # the first two variants are always in stock, so that every product has alternatives
            available = i < 2 or rng.random() < 0.7
            variants[item_id] = Variant(item_id=item_id, options=options, available=available, price=price)
        product_id = ids.digits(10)
        products[product_id] = Product(name=name, product_id=product_id, variants=variants)
    return products


def _users(rng: random.Random, ids: _Ids) -> dict[str, User]:
    users: dict[str, User] = {}
    seen_name_zip: set[tuple[str, str, str]] = set()
    emails: set[str] = set()
    while len(users) < N_USERS:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        address = _address(rng)
        if (first, last, address.zip) in seen_name_zip:
            continue
        number = rng.randint(1000, 9999)
        user_id = f"{first.lower()}_{last.lower()}_{number}"
        email = f"{first.lower()}.{last.lower()}{rng.randint(1000, 9999)}@example.com"
        if user_id in users or email in emails:
            continue
        seen_name_zip.add((first, last, address.zip))
        emails.add(email)
        methods: dict[str, Any] = {}
        kinds = rng.sample(["credit_card", "paypal", "gift_card"], k=rng.choice([1, 2, 2, 3]))
        for kind in kinds:
            if kind == "credit_card":
                pid = "credit_card_" + ids.digits(7)
                methods[pid] = CreditCard(id=pid, brand=rng.choice(BRANDS), last_four=f"{rng.randint(0, 9999):04d}")
            elif kind == "paypal":
                pid = "paypal_" + ids.digits(7)
                methods[pid] = Paypal(id=pid)
            else:
                pid = "gift_card_" + ids.digits(7)
                methods[pid] = GiftCard(id=pid, balance=float(rng.randint(0, 300)))
        users[user_id] = User(
            user_id=user_id,
            name=UserName(first_name=first, last_name=last),
            address=address,
            email=email,
            payment_methods=methods,
            orders=[],
        )
    return users


def _orders(rng: random.Random, ids: _Ids, users: dict[str, User], products: dict[str, Product]) -> dict[str, Order]:
    user_ids = list(users)
    owners = user_ids + [rng.choice(user_ids) for _ in range(N_ORDERS - len(user_ids))]
    rng.shuffle(owners)
    product_list = list(products.values())
    orders: dict[str, Order] = {}
    for user_id in owners:
        user = users[user_id]
        order_id = ids.digits(7, prefix="#W")
        picked = rng.sample(product_list, k=rng.choice([1, 1, 2, 2, 3, 4]))
        items = []
        for product in picked:
            variant = rng.choice(list(product.variants.values()))
            items.append(
                OrderItem(
                    name=product.name,
                    product_id=product.product_id,
                    item_id=variant.item_id,
                    price=variant.price,
                    options=dict(variant.options),
                )
            )
        status = rng.choices(["pending", "processed", "delivered", "cancelled"], weights=[40, 12, 38, 10])[0]
        total = round(sum(item.price for item in items), 2)
        method_id = rng.choice(list(user.payment_methods))
        history = [OrderPayment(transaction_type="payment", amount=total, payment_method_id=method_id)]
        if status == "cancelled":
            history.append(OrderPayment(transaction_type="refund", amount=total, payment_method_id=method_id))
        fulfillments = []
        if status != "pending":
            fulfillments = [OrderFullfilment(tracking_id=[ids.digits(12)], item_ids=[item.item_id for item in items])]
        address = user.address.model_copy() if rng.random() < 0.8 else _address(rng)
        orders[order_id] = Order(
            order_id=order_id,
            user_id=user_id,
            address=address,
            items=items,
            status=status,
            fulfillments=fulfillments,
            payment_history=history,
        )
        user.orders.append(order_id)
    return orders


def build_db(rng: random.Random) -> RetailDB:
    ids = _Ids(rng)
    products = _products(rng, ids)
    users = _users(rng, ids)
    orders = _orders(rng, ids, users, products)
    return RetailDB(products=products, users=users, orders=orders)


# ------------------------------------------------------------------------------------------
# tasks
# ------------------------------------------------------------------------------------------
@dataclass
class _Draft:
    kind: str
    reason: str
    known: list[str]
    unknown: str
    actions: list[tuple[str, dict[str, Any]]]
    #: computes the communicate_info strings from the replayed results; each must then occur
    #: verbatim in a rendered result, or the draft is dropped
    communicate: Callable[[list[Any]], list[str]] | None = None
    purpose: str = ""


def _describe_method(method: Any) -> str:
    if isinstance(method, CreditCard):
        return f"your {method.brand} credit card ending in {method.last_four}"
    if isinstance(method, Paypal):
        return "your PayPal account"
    return "your gift card"


def _options_text(options: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


def _num(value: float) -> str:
    """A number as it appears in a rendered tool result (JSON float form)."""
    return json.dumps(value)


class _TaskMaker:
    def __init__(self, rng: random.Random, db: RetailDB) -> None:
        self.rng = rng
        self.db = db
        self.plain = db.model_dump()
        self.used: set[tuple[str, str]] = set()

    # -- helpers -----------------------------------------------------------------------------
    def _identify(self, user: User) -> tuple[list[str], str, tuple[str, dict[str, Any]]]:
        if self.rng.random() < 0.5:
            return (
                [f"Your email is {user.email}."],
                "You do not remember your user id.",
                ("find_user_id_by_email", {"email": user.email}),
            )
        return (
            [f"You are {user.name.first_name} {user.name.last_name}, and your zip code is {user.address.zip}."],
            "You do not remember your email address.",
            (
                "find_user_id_by_name_zip",
                {"first_name": user.name.first_name, "last_name": user.name.last_name, "zip": user.address.zip},
            ),
        )

    def _orders_with(self, kind: str, predicate: Callable[[Order], bool]) -> list[Order]:
        found = [o for o in self.db.orders.values() if predicate(o) and (kind, o.order_id) not in self.used]
        return found

    def _pick_order(self, kind: str, predicate: Callable[[Order], bool]) -> Order | None:
        candidates = self._orders_with(kind, predicate)
        if not candidates:
            candidates = [o for o in self.db.orders.values() if predicate(o)]
        if not candidates:
            return None
        order = self.rng.choice(candidates)
        self.used.add((kind, order.order_id))
        return order

    def _alternatives(self, item: OrderItem) -> list[Variant]:
        product = self.db.products[item.product_id]
        return [v for v in product.variants.values() if v.available and v.item_id != item.item_id]

    def _payment_for(self, user: User, diff: float) -> tuple[str, Any] | None:
        ok = [(pid, m) for pid, m in user.payment_methods.items() if not isinstance(m, GiftCard) or m.balance >= diff]
        return self.rng.choice(ok) if ok else None

    def _new_address(self, old: UserAddress) -> UserAddress:
        while True:
            address = _address(self.rng)
            if address != old:
                return address

    @staticmethod
    def _address_args(address: UserAddress) -> dict[str, str]:
        return {
            "address1": address.address1,
            "address2": address.address2,
            "city": address.city,
            "state": address.state,
            "country": address.country,
            "zip": address.zip,
        }

    @staticmethod
    def _address_text(address: UserAddress) -> str:
        line2 = f", {address.address2}" if address.address2 else ""
        return f"{address.address1}{line2}, {address.city}, {address.state} {address.zip}, {address.country}"

    # -- kinds ---------------------------------------------------------------------------------
    def cancel(self) -> _Draft | None:
        order = self._pick_order("cancel", lambda o: o.status == "pending")
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        reason = self.rng.choice(["no longer needed", "ordered by mistake"])
        why = "you no longer need it" if reason == "no longer needed" else "you ordered it by mistake"
        names = " and ".join(item.name for item in order.items)
        return _Draft(
            kind="cancel_pending_order",
            reason=f"You want to cancel your order {order.order_id} ({names}) because {why}.",
            known=known + [f"The order id is {order.order_id}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": order.order_id}),
                ("cancel_pending_order", {"order_id": order.order_id, "reason": reason}),
            ],
            purpose="Cancel a pending order with a valid reason.",
        )

    def modify_order_address(self) -> _Draft | None:
        order = self._pick_order("order_address", lambda o: "pending" in o.status)
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        new = self._new_address(order.address)
        return _Draft(
            kind="modify_pending_order_address",
            reason=f"Your order {order.order_id} has not shipped yet and you want it delivered to a different address.",
            known=known
            + [f"The order id is {order.order_id}.", f"The new shipping address is {self._address_text(new)}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": order.order_id}),
                ("modify_pending_order_address", {"order_id": order.order_id, **self._address_args(new)}),
            ],
            purpose="Change the shipping address of a pending order.",
        )

    def _swap_plan(self, order: Order, n: int) -> tuple[list[OrderItem], list[Variant]] | None:
        swappable = [item for item in order.items if self._alternatives(item)]
        if not swappable:
            return None
        chosen = self.rng.sample(swappable, k=min(n, len(swappable)))
        targets = [self.rng.choice(self._alternatives(item)) for item in chosen]
        return chosen, targets

    def _swap_draft(self, kind: str, order: Order, tool: str, verb: str) -> _Draft | None:
        plan = self._swap_plan(order, self.rng.choice([1, 1, 2]))
        if plan is None:
            return None
        items, targets = plan
        user = self.db.users[order.user_id]
        diff = round(sum(t.price - i.price for i, t in zip(items, targets)), 2)
        payment = self._payment_for(user, diff)
        if payment is None:
            return None
        pid, method = payment
        known, unknown, ident = self._identify(user)
        wants = [
            f"the {i.name} ({_options_text(i.options)}) for the one with {_options_text(t.options)}"
            for i, t in zip(items, targets)
        ]
        actions: list[tuple[str, dict[str, Any]]] = [
            ident,
            ("get_user_details", {"user_id": user.user_id}),
            ("get_order_details", {"order_id": order.order_id}),
        ]
        for item in items:
            actions.append(("get_product_details", {"product_id": item.product_id}))
        actions.append(
            (
                tool,
                {
                    "order_id": order.order_id,
                    "item_ids": [i.item_id for i in items],
                    "new_item_ids": [t.item_id for t in targets],
                    "payment_method_id": pid,
                },
            )
        )
        return _Draft(
            kind=tool,
            reason=f"For your order {order.order_id} you want to {verb} " + "; and ".join(wants) + ".",
            known=known
            + [
                f"The order id is {order.order_id}.",
                f"Any price difference should go through {_describe_method(method)}.",
            ],
            unknown=unknown,
            actions=actions,
            purpose=f"{verb.capitalize()} items of an order for other variants of the same product.",
        )

    def modify_items(self) -> _Draft | None:
        order = self._pick_order("items", lambda o: o.status == "pending")
        return None if order is None else self._swap_draft("items", order, "modify_pending_order_items", "change")

    def exchange(self) -> _Draft | None:
        order = self._pick_order("exchange", lambda o: o.status == "delivered")
        return (
            None if order is None else self._swap_draft("exchange", order, "exchange_delivered_order_items", "exchange")
        )

    def return_items(self) -> _Draft | None:
        order = self._pick_order("return", lambda o: o.status == "delivered")
        if order is None:
            return None
        user = self.db.users[order.user_id]
        items = self.rng.sample(order.items, k=self.rng.randint(1, len(order.items)))
        original = order.payment_history[0].payment_method_id
        options = [original] + [
            pid for pid, m in user.payment_methods.items() if isinstance(m, GiftCard) and pid != original
        ]
        pid = self.rng.choice(options)
        where = "the original payment method" if pid == original else _describe_method(user.payment_methods[pid])
        known, unknown, ident = self._identify(user)
        names = ", ".join(f"the {i.name} ({_options_text(i.options)})" for i in items)
        return _Draft(
            kind="return_delivered_order_items",
            reason=f"You received your order {order.order_id} and want to return {names}.",
            known=known + [f"The order id is {order.order_id}.", f"You want the refund to go to {where}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("get_order_details", {"order_id": order.order_id}),
                (
                    "return_delivered_order_items",
                    {"order_id": order.order_id, "item_ids": [i.item_id for i in items], "payment_method_id": pid},
                ),
            ],
            purpose="Return items of a delivered order to an allowed refund method.",
        )

    def modify_payment(self) -> _Draft | None:
        def ok(o: Order) -> bool:
            if "pending" not in o.status or len(o.payment_history) != 1:
                return False
            user = self.db.users[o.user_id]
            return any(
                pid != o.payment_history[0].payment_method_id
                and (not isinstance(m, GiftCard) or m.balance >= o.payment_history[0].amount)
                for pid, m in user.payment_methods.items()
            )

        order = self._pick_order("payment", ok)
        if order is None:
            return None
        user = self.db.users[order.user_id]
        amount = order.payment_history[0].amount
        current = order.payment_history[0].payment_method_id
        choices = [
            pid
            for pid, m in user.payment_methods.items()
            if pid != current and (not isinstance(m, GiftCard) or m.balance >= amount)
        ]
        pid = self.rng.choice(choices)
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="modify_pending_order_payment",
            reason=f"You want to pay for your pending order {order.order_id} with {_describe_method(user.payment_methods[pid])} instead.",
            known=known + [f"The order id is {order.order_id}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("get_order_details", {"order_id": order.order_id}),
                ("modify_pending_order_payment", {"order_id": order.order_id, "payment_method_id": pid}),
            ],
            purpose="Switch the payment method of a pending order.",
        )

    def modify_user_address(self) -> _Draft | None:
        user = self.rng.choice(list(self.db.users.values()))
        known, unknown, ident = self._identify(user)
        new = self._new_address(user.address)
        return _Draft(
            kind="modify_user_address",
            reason="You moved and want to update the default address on your account.",
            known=known + [f"Your new address is {self._address_text(new)}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("modify_user_address", {"user_id": user.user_id, **self._address_args(new)}),
            ],
            purpose="Update a user's default address.",
        )

    def order_total(self) -> _Draft | None:
        order = self._pick_order("total", lambda o: o.status != "cancelled")
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        amount = order.payment_history[0].amount
        return _Draft(
            kind="info_order_total",
            reason=f"You want to know how much you paid in total for your order {order.order_id}. You do not want to change anything.",
            known=known + [f"The order id is {order.order_id}."],
            unknown=unknown,
            actions=[ident, ("get_order_details", {"order_id": order.order_id})],
            communicate=lambda results: [_num(amount)],
            purpose="Look up and communicate an order's total.",
        )

    def item_price(self) -> _Draft | None:
        user = self.rng.choice(list(self.db.users.values()))
        product = self.rng.choice(list(self.db.products.values()))
        variant = self.rng.choice(list(product.variants.values()))
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="info_item_price",
            reason=(
                f"You are thinking of buying a {product.name} with {_options_text(variant.options)} "
                "and want to know its price and whether it is in stock. You do not want to buy it now."
            ),
            known=known,
            unknown=unknown + " You do not know the product id.",
            actions=[
                ident,
                ("list_all_product_types", {}),
                ("get_product_details", {"product_id": product.product_id}),
            ],
            communicate=lambda results: [_num(variant.price)],
            purpose="Find a product by name and communicate a variant's price.",
        )

    def tracking(self) -> _Draft | None:
        order = self._pick_order("tracking", lambda o: o.status in ("processed", "delivered") and bool(o.fulfillments))
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        tracking = order.fulfillments[0].tracking_id[0]
        return _Draft(
            kind="info_tracking",
            reason=f"You want the tracking number of your order {order.order_id}.",
            known=known + [f"The order id is {order.order_id}."],
            unknown=unknown,
            actions=[ident, ("get_order_details", {"order_id": order.order_id})],
            communicate=lambda results: [tracking],
            purpose="Look up and communicate a tracking number.",
        )

    def sum_of_orders(self) -> _Draft | None:
        candidates = [u for u in self.db.users.values() if len(u.orders) >= 2]
        if not candidates:
            return None
        user = self.rng.choice(candidates)
        first, second = self.rng.sample(user.orders, k=2)
        a = self.db.orders[first].payment_history[0].amount
        b = self.db.orders[second].payment_history[0].amount
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="calculate_total",
            reason=f"You want to know how much your orders {first} and {second} cost together. You do not want to change anything.",
            known=known + [f"The order ids are {first} and {second}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": first}),
                ("get_order_details", {"order_id": second}),
                ("calculate", {"expression": f"{_num(a)} + {_num(b)}"}),
            ],
            communicate=lambda results: [results[-1]],
            purpose="Add two order totals with calculate and communicate the sum.",
        )

    def exchange_difference(self) -> _Draft | None:
        """Price difference of a hypothetical exchange: two look-ups and a calculate step."""
        order = self._pick_order("difference", lambda o: o.status == "delivered")
        if order is None:
            return None
        plan = self._swap_plan(order, 1)
        if plan is None:
            return None
        (item,), (target,) = plan
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="calculate_price_difference",
            reason=(
                f"In your order {order.order_id} you bought a {item.name} ({_options_text(item.options)}). Before deciding on an "
                f"exchange, you want to know how much more (or less) the one with {_options_text(target.options)} costs. "
                "You do not want to exchange anything yet."
            ),
            known=known + [f"The order id is {order.order_id}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": order.order_id}),
                ("get_product_details", {"product_id": item.product_id}),
                ("calculate", {"expression": f"{_num(target.price)} - {_num(item.price)}"}),
            ],
            communicate=lambda results: [results[-1]],
            purpose="Compute a price difference with calculate and communicate it.",
        )

    def address_everywhere(self) -> _Draft | None:
        """Two writes: the default address and a pending order's address."""
        order = self._pick_order("address_both", lambda o: "pending" in o.status)
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        new = self._new_address(user.address)
        if new == order.address:
            return None
        return _Draft(
            kind="modify_user_and_order_address",
            reason=f"You moved. You want to update your default address and also have your pending order {order.order_id} shipped to the new address.",
            known=known + [f"The order id is {order.order_id}.", f"Your new address is {self._address_text(new)}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("modify_user_address", {"user_id": user.user_id, **self._address_args(new)}),
                ("get_order_details", {"order_id": order.order_id}),
                ("modify_pending_order_address", {"order_id": order.order_id, **self._address_args(new)}),
            ],
            purpose="Update the default address and a pending order's address.",
        )

    KINDS = (
        "cancel",
        "modify_order_address",
        "modify_items",
        "exchange",
        "return_items",
        "modify_payment",
        "modify_user_address",
        "order_total",
        "item_price",
        "tracking",
        "sum_of_orders",
        "exchange_difference",
        "address_everywhere",
    )

    # -- validation ----------------------------------------------------------------------------
    def replay(self, draft: _Draft) -> list[Any] | None:
        """Replay on a fresh DB; None when a call fails or a write changes nothing."""
        tools = RetailTools(RetailDB.model_validate(self.plain))
        results = []
        for name, arguments in draft.actions:
            before = tools.db.model_dump_json() if tools.specs[name].mutates else None
            try:
                results.append(tools.call(name, arguments))
            except ToolError:
                return None
            if before is not None and tools.db.model_dump_json() == before:
                return None
        return results

    def make(self, kind: str, task_id: str) -> dict[str, Any] | None:
        draft: _Draft | None = getattr(self, kind)()
        if draft is None:
            return None
        results = self.replay(draft)
        if results is None:
            return None
        communicate: list[str] = []
        if draft.communicate is not None:
            communicate = draft.communicate(results)
            rendered = [render_result(r) for r in results]
            if not all(any(s in text for text in rendered) for s in communicate):
                return None
        actions = [
            {"action_id": f"{task_id}_{i}", "requestor": "assistant", "name": name, "arguments": args, "info": None}
            for i, (name, args) in enumerate(draft.actions)
        ]
        return {
            "id": task_id,
            "description": {"purpose": draft.purpose, "relevant_policies": None, "notes": f"kind: {draft.kind}"},
            "user_scenario": {
                "persona": None,
                "instructions": {
                    "domain": "retail",
                    "reason_for_call": draft.reason,
                    "known_info": " ".join(draft.known),
                    "unknown_info": draft.unknown,
                    "task_instructions": self.rng.choice(PERSONAS),
                },
            },
            "initial_state": None,
            "evaluation_criteria": {
                "actions": actions,
                "communicate_info": communicate,
                "nl_assertions": None,
                "reward_basis": ["DB", "COMMUNICATE"] if communicate else ["DB"],
            },
        }


def build_tasks(rng: random.Random, db: RetailDB, n_tasks: int) -> list[dict[str, Any]]:
    maker = _TaskMaker(rng, db)
    tasks: list[dict[str, Any]] = []
    kinds = list(_TaskMaker.KINDS)
    cycle: list[str] = []
    failures = 0
    while len(tasks) < n_tasks:
        if not cycle:
            cycle = kinds[:]
            rng.shuffle(cycle)
        kind = cycle.pop()
        task = maker.make(kind, str(len(tasks)))
        if task is None:
            failures += 1
            if failures > 50 * max(n_tasks, 1):
                raise RuntimeError("retail generator: could not draw enough valid tasks")
            continue
        tasks.append(task)
    return tasks


def split(rng: random.Random, task_ids: list[str], eval_fraction: float) -> dict[str, list[str]]:
    if not 0.0 <= eval_fraction <= 1.0:
        raise ValueError(f"eval_fraction must be within [0, 1], got {eval_fraction}")
    shuffled = task_ids[:]
    rng.shuffle(shuffled)
    n_test = round(len(shuffled) * eval_fraction)
    test = set(shuffled[:n_test])
    return {
        "train": [t for t in task_ids if t not in test],
        "test": [t for t in task_ids if t in test],
    }


def package_policy() -> str:
    return resources.files(__package__).joinpath("policy.md").read_text()


def generate(out_dir: Path | str, seed: int, n_tasks: int = 120, eval_fraction: float = 0.3) -> Path:
    """Write db.json, policy.md, tasks.json and split_tasks.json for ``seed`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    db = build_db(rng)
    tasks = build_tasks(rng, db, n_tasks)
    splits = split(rng, [t["id"] for t in tasks], eval_fraction)
    db.dump_json(out / "db.json")
    (out / "policy.md").write_text(package_policy())
    (out / "tasks.json").write_text(json.dumps(tasks, indent=2, ensure_ascii=False) + "\n")
    (out / "split_tasks.json").write_text(json.dumps(splits, indent=2) + "\n")
    return out
