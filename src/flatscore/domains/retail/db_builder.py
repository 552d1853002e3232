"""The generated retail database: products with variants, users with payment methods, orders.

Each builder draws from the one ``random.Random`` that :func:`~.generator.generate` seeds, in
a fixed order (products, users, orders), so the same seed always gives the same database.
"""

from __future__ import annotations

import random
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
