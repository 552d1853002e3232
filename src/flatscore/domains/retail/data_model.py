"""The retail world as pydantic models, in the shape of tau2-bench's retail ``db.json``.

Field names (including tau2's spelling ``OrderFullfilment``/``fulfillments``) follow the
reference data so that a tau2-bench ``db.json`` loads unchanged and dumps back to the same keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class Variant(_Model):
    """One purchasable item of a product: its options, stock flag and price."""

    item_id: str
    options: dict[str, str]
    available: bool
    price: float


class Product(_Model):
    """A product type and its variants, keyed by item id."""

    name: str
    product_id: str
    variants: dict[str, Variant]


class UserName(_Model):
    first_name: str
    last_name: str


class UserAddress(_Model):
    address1: str
    address2: str
    city: str
    country: str
    state: str
    zip: str


class CreditCard(_Model):
    source: Literal["credit_card"] = "credit_card"
    id: str
    brand: str
    last_four: str


class Paypal(_Model):
    source: Literal["paypal"] = "paypal"
    id: str


class GiftCard(_Model):
    source: Literal["gift_card"] = "gift_card"
    id: str
    balance: float


PaymentMethod = Annotated[Union[CreditCard, GiftCard, Paypal], Field(discriminator="source")]


class User(_Model):
    user_id: str
    name: UserName
    address: UserAddress
    email: str
    payment_methods: dict[str, PaymentMethod]
    orders: list[str]


class OrderFullfilment(_Model):
    """One shipment: its tracking numbers and the item ids it carries."""

    tracking_id: list[str]
    item_ids: list[str]


class OrderItem(_Model):
    name: str
    product_id: str
    item_id: str
    price: float
    options: dict[str, str]


TransactionType = Literal["payment", "refund"]


class OrderPayment(_Model):
    transaction_type: TransactionType
    amount: float
    payment_method_id: str


OrderStatus = Literal[
    "pending",
    "pending (item modified)",
    "processed",
    "delivered",
    "cancelled",
    "exchange requested",
    "return requested",
]

CancelReason = Literal["no longer needed", "ordered by mistake"]
CANCEL_REASONS: tuple[str, ...] = ("no longer needed", "ordered by mistake")


class Order(_Model):
    order_id: str
    user_id: str
    address: UserAddress
    items: list[OrderItem]
    status: OrderStatus
    fulfillments: list[OrderFullfilment]
    payment_history: list[OrderPayment]
    cancel_reason: CancelReason | None = None
    exchange_items: list[str] | None = None
    exchange_new_items: list[str] | None = None
    exchange_payment_method_id: str | None = None
    exchange_price_difference: float | None = None
    return_items: list[str] | None = None
    return_payment_method_id: str | None = None


class RetailDB(_Model):
    """The whole store: products by product id, users by user id, orders by order id ('#W...')."""

    products: dict[str, Product]
    users: dict[str, User]
    orders: dict[str, Order]

    @classmethod
    def load(cls, path: Path | str) -> "RetailDB":
        return cls.model_validate_json(Path(path).read_bytes())

    def dump_json(self, path: Path | str) -> None:
        """Write ``db.json`` the way tau2 stores it (optional order fields left out when unset)."""
        data = self.model_dump(mode="json", exclude_none=True)
        Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
