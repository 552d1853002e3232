"""The generated retail database: products with variants, users with payment methods, orders.

Each builder draws from the one ``random.Random`` that :func:`~.generator.generate` seeds, in
a fixed order (products, users, orders), so the same seed always gives the same database.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from .catalogue import BRANDS, CATALOGUE, CITIES, FIRST_NAMES, LAST_NAMES, N_ORDERS, N_USERS, STREETS
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


@dataclass(frozen=True)
class IdShapes:
    """How long the generated ids are, and how many items an order holds.

    ``tau2`` has tau2-bench's shapes (10-digit product and item ids, '#W' + 7 digits...).
    ``short`` gives every id 3 digits, one token of the demo model's tokenizer (which cuts digit
    runs into threes), and orders of at most 2 items: copying an id from a tool result into the
    next call is then one token to copy instead of four. Measured on the default demo model (800
    steps, 40 eval tasks per domain at K=10): 2/40 telecom and 0/40 retail (mostly malformed
    calls and wrongly copied phone numbers), far from the target, so the embedded default keeps ``tau2``; ``short`` stays for experiments with
    small models. Both draw from the generator's random stream in the
    same order, so ``tau2`` data is byte-identical to what the generator wrote before shapes existed.
    """

    catalogue_digits: int
    payment_digits: int
    order_digits: int
    user_digits: int
    items_per_order: tuple[int, ...]


ID_SHAPES: dict[str, IdShapes] = {
    "tau2": IdShapes(
        catalogue_digits=10, payment_digits=7, order_digits=7, user_digits=4, items_per_order=(1, 1, 2, 2, 3, 4)
    ),
    "short": IdShapes(
        catalogue_digits=3, payment_digits=3, order_digits=3, user_digits=3, items_per_order=(1, 1, 2, 2)
    ),
}


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


def _address(rng: random.Random, made_up_zip: bool = False) -> UserAddress:
    city, state, zip_prefix = rng.choice(CITIES)
    address1 = f"{rng.randint(10, 999)} {rng.choice(STREETS)}"
    address2 = rng.choice(["", f"Suite {rng.randint(100, 999)}", f"Apt {rng.randint(1, 40)}"])
    zip_code = f"{rng.randint(10000, 99999)}" if made_up_zip else f"{zip_prefix}{rng.randint(0, 99):02d}"
    return UserAddress(address1=address1, address2=address2, city=city, country="USA", state=state, zip=zip_code)


def _products(rng: random.Random, ids: _Ids, shapes: IdShapes) -> dict[str, Product]:
    products: dict[str, Product] = {}
    for name, (base, dims) in CATALOGUE.items():
        combos = [{}]
        for option, values in dims.items():
            combos = [dict(c, **{option: v}) for c in combos for v in values]
        rng.shuffle(combos)
        chosen = combos[: rng.randint(5, min(9, len(combos)))]
        variants: dict[str, Variant] = {}
        for i, options in enumerate(chosen):
            item_id = ids.digits(shapes.catalogue_digits)
            price = round(base * rng.uniform(0.8, 1.25), 2)
            # the first two variants are always in stock, so that every product has alternatives
            available = i < 2 or rng.random() < 0.7
            variants[item_id] = Variant(item_id=item_id, options=options, available=available, price=price)
        product_id = ids.digits(shapes.catalogue_digits)
        products[product_id] = Product(name=name, product_id=product_id, variants=variants)
    return products


#: Syllables of made-up names (``identities="open"``): consonant + vowel, ~70 of them.
_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
#: Identity shapes: ``pool`` draws names from the catalogue's 30 first and 25 last names and a
#: zip from its 12 cities' prefixes; ``open`` makes up each name from 2-3 random syllables and the
#: zip from 5 random digits, so that no name or zip is frequent enough to be guessed.
IDENTITY_SHAPES = ("pool", "open")


def _made_up_name(rng: random.Random) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 2, 3)))).capitalize()


def _users(rng: random.Random, ids: _Ids, shapes: IdShapes, identities: str = "pool") -> dict[str, User]:
    users: dict[str, User] = {}
    seen_name_zip: set[tuple[str, str, str]] = set()
    emails: set[str] = set()
    while len(users) < N_USERS:
        if identities == "open":
            first, last = _made_up_name(rng), _made_up_name(rng)
        else:
            first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        address = _address(rng, made_up_zip=identities == "open")
        if (first, last, address.zip) in seen_name_zip:
            continue
        number = rng.randint(10 ** (shapes.user_digits - 1), 10**shapes.user_digits - 1)
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
                pid = "credit_card_" + ids.digits(shapes.payment_digits)
                methods[pid] = CreditCard(id=pid, brand=rng.choice(BRANDS), last_four=f"{rng.randint(0, 9999):04d}")
            elif kind == "paypal":
                pid = "paypal_" + ids.digits(shapes.payment_digits)
                methods[pid] = Paypal(id=pid)
            else:
                pid = "gift_card_" + ids.digits(shapes.payment_digits)
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


def _orders(
    rng: random.Random, ids: _Ids, users: dict[str, User], products: dict[str, Product], shapes: IdShapes
) -> dict[str, Order]:
    user_ids = list(users)
    owners = user_ids + [rng.choice(user_ids) for _ in range(N_ORDERS - len(user_ids))]
    rng.shuffle(owners)
    product_list = list(products.values())
    orders: dict[str, Order] = {}
    for user_id in owners:
        user = users[user_id]
        order_id = ids.digits(shapes.order_digits, prefix="#W")
        picked = rng.sample(product_list, k=rng.choice(shapes.items_per_order))
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


def build_db(rng: random.Random, ids: str = "tau2", identities: str = "pool") -> RetailDB:
    """The database for ``rng``'s stream; ``ids`` names the :data:`ID_SHAPES` to draw,
    ``identities`` one of :data:`IDENTITY_SHAPES`."""
    if ids not in ID_SHAPES:
        raise ValueError(f"ids: expected one of {sorted(ID_SHAPES)}, got {ids!r}")
    if identities not in IDENTITY_SHAPES:
        raise ValueError(f"identities: expected one of {list(IDENTITY_SHAPES)}, got {identities!r}")
    shapes = ID_SHAPES[ids]
    digits = _Ids(rng)
    products = _products(rng, digits, shapes)
    users = _users(rng, digits, shapes, identities)
    orders = _orders(rng, digits, users, products, shapes)
    return RetailDB(products=products, users=users, orders=orders)
