"""The retail agent's tools, with tau2-bench's names, arguments, results and error messages.

Every tool returns a snapshot (a deep copy) of the record it read or changed, so that a result
kept in a trajectory does not change when a later call mutates the database. Domain failures
raise :class:`~flatscore.domains.toolkit.ToolError` carrying tau2-bench's message text.
"""

from __future__ import annotations

import ast
import json
import operator
import unicodedata
from collections import Counter
from typing import Literal

from ..cow import peek_items, peek_values
from ..toolkit import ToolError, Toolkit, tool
from .data_model import (
    CANCEL_REASONS,
    GiftCard,
    Order,
    OrderPayment,
    PaymentMethod,
    Product,
    RetailDB,
    User,
    UserAddress,
    Variant,
)

_CALC_CHARS = set("0123456789+-*/(). ")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _fold(text: str) -> str:
    """Case- and accent-insensitive form of a name or email, for identity lookups."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold().strip()


def _lower(text: str) -> str:
    """tau2's identity comparison (parity mode): lower case only, accents kept."""
    return text.lower()


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise ToolError("Invalid expression")


def _count_missing(wanted: list[str], present: list[str]) -> str | None:
    """The first id requested more times than the order holds it, if any."""
    have = Counter(present)
    need = Counter(wanted)
    for item_id in wanted:
        if need[item_id] > have[item_id]:
            return item_id
    return None


class RetailTools(Toolkit):
    """Customer-service tools over one :class:`RetailDB` (the agent's side)."""

    side = "assistant"
    db: RetailDB

    def __init__(self, db: RetailDB) -> None:
        super().__init__(db)

    # -- look-ups shared by the tools ------------------------------------------------------
    def _order(self, order_id: str) -> Order:
        order = self.db.orders.get(order_id)
        if order is None:
            raise ToolError("Order not found")
        return order

    def _user(self, user_id: str) -> User:
        user = self.db.users.get(user_id)
        if user is None:
            raise ToolError("User not found")
        return user

    def _product(self, product_id: str) -> Product:
        product = self.db.products.get(product_id)
        if product is None:
            raise ToolError("Product not found")
        return product

    def _variant(self, product_id: str, item_id: str) -> Variant:
        variant = self._product(product_id).variants.get(item_id)
        if variant is None:
            raise ToolError("Variant not found")
        return variant

    def _payment_method(self, user_id: str, payment_method_id: str) -> PaymentMethod:
        method = self._user(user_id).payment_methods.get(payment_method_id)
        if method is None:
            raise ToolError("Payment method not found")
        return method

    @staticmethod
    def _snapshot(record):  # type: ignore[no-untyped-def]
        return record.model_copy(deep=True)

    # -- generic ---------------------------------------------------------------------------
    @tool
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression such as '(12.5 + 7) * 2' (numbers, + - * /, parentheses) and return the result rounded to 2 decimals."""
        if not all(ch in _CALC_CHARS for ch in expression):
            raise ToolError("Invalid characters in expression")
        try:
            value = _evaluate(ast.parse(expression.strip(), mode="eval"))
        except SyntaxError as exc:
            raise ToolError("Invalid expression") from exc
        except ZeroDivisionError as exc:
            raise ToolError("Division by zero") from exc
        return str(round(float(value), 2))

    @tool
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the conversation to a human agent with a short summary of the issue. Use only if the user asks for a human or the request is outside what the policy and tools allow."""
        return "Transfer successful"

    # -- read ------------------------------------------------------------------------------
    @tool
    def find_user_id_by_email(self, email: str) -> str:
        """Look up a user id by email address (e.g. 'jane.doe1234@example.com'); the preferred way to authenticate."""
        fold = _lower if self.tau2_parity else _fold
        wanted = fold(email)
        for user_id, user in peek_items(self.db.users):  # read-only scan: claims nothing
            if fold(user.email) == wanted:
                return user_id
        raise ToolError("User not found")

    @tool
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Look up a user id by first name, last name and 5-digit zip code; use when the user cannot give their email."""
        fold = _lower if self.tau2_parity else _fold
        first, last = fold(first_name), fold(last_name)
        for user_id, user in peek_items(self.db.users):  # read-only scan: claims nothing
            if fold(user.name.first_name) == first and fold(user.name.last_name) == last and user.address.zip == zip:
                return user_id
        raise ToolError("User not found")

    @tool
    def get_user_details(self, user_id: str) -> User:
        """Get a user's profile: name, email, default address, payment methods and order ids. user_id looks like 'jane_doe_1234'."""
        return self._snapshot(self._user(user_id))

    @tool
    def get_order_details(self, order_id: str) -> Order:
        """Get an order's status, items, address, shipments and payments. order_id starts with '#', e.g. '#W1234567'."""
        return self._snapshot(self._order(order_id))

    @tool
    def get_product_details(self, product_id: str) -> Product:
        """Get a product type and all its variant items (options, availability, price). product_id is a 10-digit string, not an item id."""
        return self._snapshot(self._product(product_id))

    @tool
    def get_item_details(self, item_id: str) -> Variant:
        """Get one variant item (options, availability, price) by its 10-digit item id, which differs from the product id."""
        for product in peek_values(self.db.products):  # read-only scan; the result is a snapshot
            if item_id in product.variants:
                return self._snapshot(product.variants[item_id])
        raise ToolError("Item not found")

    @tool
    def list_all_product_types(self) -> str:
        """List every product type as a JSON object mapping product name to product id, sorted by name."""
        names = {product.name: product.product_id for product in peek_values(self.db.products)}
        return json.dumps(names, sort_keys=True)

    # -- write: pending orders -------------------------------------------------------------
    @tool(mutates=True)
    def cancel_pending_order(self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]) -> Order:
        """Cancel a pending order (order_id like '#W1234567') for one of the two allowed reasons; payments are refunded, gift cards at once. Needs the user's explicit confirmation."""
        order = self._order(order_id)
        if order.status != "pending":
            raise ToolError("Non-pending order cannot be cancelled")
        if reason not in frozenset(CANCEL_REASONS):  # a set, as in tau2: an unhashable reason is a TypeError
            raise ToolError("Invalid reason")
        refunds = []
        for payment in order.payment_history:
            refunds.append(
                OrderPayment(
                    transaction_type="refund", amount=payment.amount, payment_method_id=payment.payment_method_id
                )
            )
            method = self._payment_method(order.user_id, payment.payment_method_id)
            if isinstance(method, GiftCard):
                method.balance = round(method.balance + payment.amount, 2)
        order.status = "cancelled"
        order.cancel_reason = reason
        order.payment_history.extend(refunds)
        return self._snapshot(order)

    @tool(mutates=True)
    def modify_pending_order_address(
        self, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> Order:
        """Change the shipping address of a pending order (order_id like '#W1234567'); address2 may be ''. Needs the user's explicit confirmation."""
        order = self._order(order_id)
        if "pending" not in order.status:
            raise ToolError("Non-pending order cannot be modified")
        order.address = UserAddress(
            address1=address1, address2=address2, city=city, state=state, country=country, zip=zip
        )
        return self._snapshot(order)

    @tool(mutates=True)
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Swap items of a pending order for other available variants of the same product, position by position; the price difference is charged or refunded to payment_method_id. Can be done only once per order; needs explicit confirmation."""
        order = self._order(order_id)
        if order.status != "pending":
            raise ToolError("Non-pending order cannot be modified")
        missing = _count_missing(item_ids, [item.item_id for item in order.items])
        if missing is not None:
            raise ToolError(f"{missing} not found")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match")
        diff = 0.0
        variant: Variant | None = None
        for item_id, new_item_id in zip(item_ids, new_item_ids):
            if item_id == new_item_id:
                raise ToolError("The new item id should be different from the old item id")
            item = next((it for it in order.items if it.item_id == item_id), None)
            if item is None:
                raise ToolError(f"Item {item_id} not found")
            variant = self._variant(item.product_id, new_item_id)
            if not variant.available:
                raise ToolError(f"New item {new_item_id} not found or available")
            diff += variant.price - item.price
        if not self.tau2_parity:  # tau2 charges the unrounded difference
            diff = round(diff, 2)
        method = self._payment_method(order.user_id, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff:
            raise ToolError("Insufficient gift card balance to pay for the new item")
        order.payment_history.append(
            OrderPayment(
                transaction_type="payment" if diff > 0 else "refund",
                amount=abs(diff),
                payment_method_id=payment_method_id,
            )
        )
        if isinstance(method, GiftCard):
            method.balance = round(method.balance - diff, 2)
        last_variant = variant  # the loop above ran at least once where this is read
        for item_id, new_item_id in zip(item_ids, new_item_ids):
            item = next(it for it in order.items if it.item_id == item_id)
            # parity mode keeps tau2's bug: every modified item gets the *last* new item's price and options
            chosen = last_variant if self.tau2_parity else self._variant(item.product_id, new_item_id)
            item.item_id = new_item_id
            assert chosen is not None
            item.price = chosen.price
            item.options = dict(chosen.options)
        order.status = "pending (item modified)"
        return self._snapshot(order)

    @tool(mutates=True)
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> Order:
        """Pay a pending order (order_id like '#W1234567') with a different one of the user's payment methods, e.g. 'gift_card_1234567'; the old one is refunded. Needs explicit confirmation."""
        order = self._order(order_id)
        if "pending" not in order.status:
            raise ToolError("Non-pending order cannot be modified")
        method = self._payment_method(order.user_id, payment_method_id)
        history = order.payment_history
        if len(history) != 1 or history[0].transaction_type != "payment":
            raise ToolError("There should be exactly one payment for a pending order")
        old_id = history[0].payment_method_id
        if old_id == payment_method_id:
            raise ToolError("The new payment method should be different from the current one")
        amount = history[0].amount
        if isinstance(method, GiftCard) and method.balance < amount:
            raise ToolError("Insufficient gift card balance to pay for the order")
        history.append(OrderPayment(transaction_type="payment", amount=amount, payment_method_id=payment_method_id))
        history.append(OrderPayment(transaction_type="refund", amount=amount, payment_method_id=old_id))
        if isinstance(method, GiftCard):
            method.balance = round(method.balance - amount, 2)
        old_method = self._payment_method(order.user_id, old_id)
        if isinstance(old_method, GiftCard):
            old_method.balance = round(old_method.balance + amount, 2)
        return self._snapshot(order)

    # -- write: users ----------------------------------------------------------------------
    @tool(mutates=True)
    def modify_user_address(
        self, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> User:
        """Change a user's default address (user_id like 'jane_doe_1234'; address2 may be ''). Needs the user's explicit confirmation."""
        user = self._user(user_id)
        user.address = UserAddress(
            address1=address1, address2=address2, city=city, state=state, country=country, zip=zip
        )
        return self._snapshot(user)

    # -- write: delivered orders -----------------------------------------------------------
    @tool(mutates=True)
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> Order:
        """Request a return of items of a delivered order (order_id like '#W1234567'); the refund goes to the original payment method or a gift card of the user. Needs explicit confirmation."""
        order = self._order(order_id)
        if order.status != "delivered":
            raise ToolError("Non-delivered order cannot be returned")
        method = self._payment_method(order.user_id, payment_method_id)
        if not isinstance(method, GiftCard) and payment_method_id != order.payment_history[0].payment_method_id:
            raise ToolError("Payment method should be the original payment method")
        if _count_missing(item_ids, [item.item_id for item in order.items]) is not None:
            raise ToolError("Some item not found")
        order.status = "return requested"
        order.return_items = sorted(item_ids)
        order.return_payment_method_id = payment_method_id
        return self._snapshot(order)

    @tool(mutates=True)
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> Order:
        """Exchange items of a delivered order for other available variants of the same product, position by position; the price difference goes through payment_method_id. Only once per order; needs explicit confirmation."""
        order = self._order(order_id)
        if order.status != "delivered":
            raise ToolError("Non-delivered order cannot be exchanged")
        missing = _count_missing(item_ids, [item.item_id for item in order.items])
        if missing is not None:
            raise ToolError(f"Number of {missing} not found.")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match.")
        diff = 0.0
        for item_id, new_item_id in zip(item_ids, new_item_ids):
            item = next((it for it in order.items if it.item_id == item_id), None)
            if item is None:
                raise ToolError(f"Item {item_id} not found")
            variant = self._variant(item.product_id, new_item_id)
            if not variant.available:
                raise ToolError(f"New item {new_item_id} not found or available")
            diff += variant.price - item.price
        diff = round(diff, 2)
        method = self._payment_method(order.user_id, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff:
            raise ToolError("Insufficient gift card balance to pay for the price difference")
        order.status = "exchange requested"
        order.exchange_items = sorted(item_ids)
        order.exchange_new_items = sorted(new_item_ids)
        order.exchange_payment_method_id = payment_method_id
        order.exchange_price_difference = diff
        return self._snapshot(order)
