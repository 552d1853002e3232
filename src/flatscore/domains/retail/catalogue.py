"""The fixed vocabulary of the synthetic retail world: products, names, places, personas.

Kept apart from the code that draws from it so that the data can be read (and extended) at a
glance; the generator's random draws index into these lists, so reordering or editing an
entry changes every generated file for every seed.
"""

from __future__ import annotations

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
