"""A few built-in retail-like tool-calling conversations (for untrained builds and smoke tests)."""

from __future__ import annotations

import json

SAMPLE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "find_user_id_by_email",
            "description": "Find a user id by email.",
            "parameters": {
                "type": "object",
                "properties": {"email": {"type": "string"}},
                "required": ["email"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Get the status and details of an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_pending_order",
            "description": "Cancel a pending order.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
                },
                "required": ["order_id", "reason"],
            },
        },
    },
]


def _call(i: int, name: str, **args) -> dict:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def sample_conversations(n: int = 6) -> list[dict]:
    names = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
    convs = []
    for i in range(n):
        who = names[i % len(names)]
        order = f"#W{1000 + 37 * i}"
        status = "pending" if i % 2 == 0 else "delivered"
        msgs = [
            {"role": "system", "content": "You are a retail customer service agent. Follow the policy."},
            {"role": "user", "content": f"Hi, I want to cancel my order {order}. My email is {who}@example.com."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_call(0, "find_user_id_by_email", email=f"{who}@example.com")],
            },
            {"role": "tool", "tool_call_id": "call_0", "name": "find_user_id_by_email", "content": f"{who}_{i}"},
            {"role": "assistant", "content": None, "tool_calls": [_call(1, "get_order_details", order_id=order)]},
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "name": "get_order_details",
                "content": json.dumps({"order_id": order, "user_id": f"{who}_{i}", "status": status}),
            },
        ]
        if status == "pending":
            msgs += [
                {
                    "role": "assistant",
                    "content": f"Order {order} is pending. Shall I cancel it because it is no longer needed?",
                },
                {"role": "user", "content": "Yes, please."},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [_call(2, "cancel_pending_order", order_id=order, reason="no longer needed")],
                },
                {
                    "role": "tool",
                    "tool_call_id": "call_2",
                    "name": "cancel_pending_order",
                    "content": json.dumps({"order_id": order, "status": "cancelled"}),
                },
                {"role": "assistant", "content": f"Done: order {order} is cancelled."},
            ]
        else:
            msgs += [
                {"role": "assistant", "content": f"Order {order} was already delivered, so it cannot be cancelled."},
            ]
        convs.append({"messages": msgs, "tools": SAMPLE_TOOLS})
    return convs
