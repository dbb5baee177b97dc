"""Build the local query workload: four domains standing in for the paper's datasets.

Nothing is downloaded. Every domain has a train and an eval split in the conversation-JSON
format (`osd/conversations.py`), with the grouping fields the online experiments use:

- `sql` (stands in for Spider): text-to-SQL over three small sqlite schemas (`school`,
  `shop`, `flights`). Questions come from templates whose slots are filled with values from
  the databases' own rows; every SQL answer is executed in sqlite3 before it is kept.
  `topic` = the database.
- `math` (stands in for GSM8K): grade-school word problems from templates (shopping, rates,
  sharing, ages, savings, geometry) with names, objects and numbers drawn at random, and a
  short worked answer ending in `#### <number>` as in GSM8K. `topic` = the problem kind.
- `code` (stands in for CodeSearchNet-Python): real text. (docstring -> function) pairs
  extracted with `ast` from the installed Python standard library; the prompt is the
  docstring's first paragraph, the answer the function without its docstring. Only short
  functions are kept. `topic` = the top-level module, `language` = "python". The text depends
  on the Python version installed (the same installation gives the same bytes).
- `finance` (stands in for Finance-Alpaca): procedural finance questions (interest, returns,
  ratios, loans, budgeting) with computed answers, and definition questions over a small
  glossary asked in several phrasings. `topic` = the question kind.

Output: `{out_dir}/{domain}_{train,eval}.json`. The same seed gives the same bytes.

Usage:
    python data/build_local_workload.py                       # writes data/local/
    python data/build_local_workload.py --seed 1 --out_dir /tmp/workload --train_size 500
"""

from __future__ import annotations

import argparse
import ast
import functools
import random
import sqlite3
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from osd.conversations import save_conversations  # noqa: E402
from osd.user_errors import run_main

DOMAINS = ("sql", "math", "code", "finance")

NAMES = [
    "Alice", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kofi",
    "Lena", "Marco", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera",
    "Wei", "Yusuf", "Zoe",
]  # fmt: skip


def record(domain: str, split: str, i: int, query: str, answer: str, **groups: str) -> dict:
    return {
        "id": f"{domain}_{split}_{i}",
        "conversation": [{"role": "user", "content": query}, {"role": "assistant", "content": answer}],
        "dataset": domain,
        **groups,
    }


# ----------------------------------------------------------------------------- sql

SCHEMAS = {
    "school": """
        CREATE TABLE majors (id INTEGER PRIMARY KEY, name TEXT, department TEXT);
        CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, city TEXT,
                               major_id INTEGER REFERENCES majors(id), gpa REAL);""",
    "shop": """
        CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, category TEXT, price REAL);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, product_id INTEGER REFERENCES products(id),
                             customer TEXT, city TEXT, quantity INTEGER);""",
    "flights": """
        CREATE TABLE airports (code TEXT PRIMARY KEY, city TEXT, country TEXT);
        CREATE TABLE flights (id INTEGER PRIMARY KEY, airline TEXT, origin TEXT REFERENCES airports(code),
                              destination TEXT REFERENCES airports(code), distance INTEGER);""",
}
CITIES = ["Paris", "Lima", "Oslo", "Cairo", "Tokyo", "Denver", "Madrid", "Nairobi", "Seoul", "Dublin"]
MAJORS = [("Physics", "Science"), ("Biology", "Science"), ("History", "Arts"), ("Music", "Arts"),
          ("Economics", "Business"), ("Finance", "Business"), ("Computer Science", "Engineering")]  # fmt: skip
PRODUCTS = [("laptop", "electronics"), ("phone", "electronics"), ("headphones", "electronics"),
            ("desk", "furniture"), ("chair", "furniture"), ("lamp", "furniture"), ("novel", "books"),
            ("cookbook", "books"), ("atlas", "books"), ("kettle", "kitchen"), ("blender", "kitchen")]  # fmt: skip
AIRPORTS = [("CDG", "Paris", "France"), ("LIM", "Lima", "Peru"), ("OSL", "Oslo", "Norway"),
            ("CAI", "Cairo", "Egypt"), ("HND", "Tokyo", "Japan"), ("DEN", "Denver", "USA"),
            ("MAD", "Madrid", "Spain"), ("NBO", "Nairobi", "Kenya"), ("ICN", "Seoul", "Korea")]  # fmt: skip
AIRLINES = ["Aurora Air", "Blue Jet", "Condor Lines", "Delta Wings", "Eagle Express"]


def build_database(db: str, rng: random.Random) -> sqlite3.Connection:
    """An in-memory database for schema `db`, filled with seeded rows."""
    con = sqlite3.connect(":memory:")
    con.executescript(SCHEMAS[db])
    if db == "school":
        con.executemany(
            "INSERT INTO majors VALUES (?,?,?)", [(i + 1, n, d) for i, (n, d) in enumerate(MAJORS)]
        )
        con.executemany(
            "INSERT INTO students VALUES (?,?,?,?,?,?)",
            [(i + 1, n, rng.randint(18, 30), rng.choice(CITIES), rng.randint(1, len(MAJORS)),
              round(rng.uniform(2.0, 4.0), 2)) for i, n in enumerate(NAMES)],
        )  # fmt: skip
    elif db == "shop":
        con.executemany(
            "INSERT INTO products VALUES (?,?,?,?)",
            [(i + 1, n, c, round(rng.uniform(5, 900), 2)) for i, (n, c) in enumerate(PRODUCTS)],
        )
        con.executemany(
            "INSERT INTO orders VALUES (?,?,?,?,?)",
            [(i + 1, rng.randint(1, len(PRODUCTS)), rng.choice(NAMES), rng.choice(CITIES), rng.randint(1, 9))
             for i in range(60)],
        )  # fmt: skip
    else:
        con.executemany("INSERT INTO airports VALUES (?,?,?)", AIRPORTS)
        con.executemany(
            "INSERT INTO flights VALUES (?,?,?,?,?)",
            [(i + 1, rng.choice(AIRLINES), *rng.sample([a[0] for a in AIRPORTS], 2), rng.randint(300, 9000))
             for i in range(50)],
        )  # fmt: skip
    return con


# Each template: (question, SQL), with {slots} filled from SQL_SLOTS.
SQL_TEMPLATES = {
    "school": [
        ("List the names of students older than {age}.", "SELECT name FROM students WHERE age > {age}"),
        ("How many students live in {city}?", "SELECT COUNT(*) FROM students WHERE city = '{city}'"),
        ("What is the average GPA of students from {city}?", "SELECT AVG(gpa) FROM students WHERE city = '{city}'"),
        ("Show the names of students majoring in {major}.",
         "SELECT s.name FROM students AS s JOIN majors AS m ON s.major_id = m.id WHERE m.name = '{major}'"),
        ("How many students are in each department?",
         "SELECT m.department, COUNT(*) FROM students AS s JOIN majors AS m ON s.major_id = m.id GROUP BY m.department"),
        ("Which student has the highest GPA?", "SELECT name FROM students ORDER BY gpa DESC LIMIT 1"),
        ("List the {n} youngest students.", "SELECT name FROM students ORDER BY age ASC LIMIT {n}"),
        ("Find the names of students with a GPA above {gpa} who are younger than {age}.",
         "SELECT name FROM students WHERE gpa > {gpa} AND age < {age}"),
        ("What majors belong to the {dept} department?", "SELECT name FROM majors WHERE department = '{dept}'"),
        ("What is the maximum age of students in {city}?", "SELECT MAX(age) FROM students WHERE city = '{city}'"),
    ],
    "shop": [
        ("List all products in the {category} category.", "SELECT name FROM products WHERE category = '{category}'"),
        ("How many orders were placed from {city}?", "SELECT COUNT(*) FROM orders WHERE city = '{city}'"),
        ("What is the average price of {category} products?",
         "SELECT AVG(price) FROM products WHERE category = '{category}'"),
        ("Which products cost less than {price} dollars?", "SELECT name FROM products WHERE price < {price}"),
        ("What is the total quantity ordered by {name}?", "SELECT SUM(quantity) FROM orders WHERE customer = '{name}'"),
        ("Show the customers who ordered a {product}.",
         "SELECT DISTINCT o.customer FROM orders AS o JOIN products AS p ON o.product_id = p.id WHERE p.name = '{product}'"),
        ("How many orders are there for each category?",
         "SELECT p.category, COUNT(*) FROM orders AS o JOIN products AS p ON o.product_id = p.id GROUP BY p.category"),
        ("What are the {n} most expensive products?", "SELECT name FROM products ORDER BY price DESC LIMIT {n}"),
        ("List the orders with a quantity of at least {qty}.", "SELECT id FROM orders WHERE quantity >= {qty}"),
        ("Which cities have more than {n} orders?",
         "SELECT city FROM orders GROUP BY city HAVING COUNT(*) > {n}"),
    ],
    "flights": [
        ("How many flights does {airline} operate?", "SELECT COUNT(*) FROM flights WHERE airline = '{airline}'"),
        ("List the flights that depart from {code}.", "SELECT id FROM flights WHERE origin = '{code}'"),
        ("What is the average distance of flights to {code}?",
         "SELECT AVG(distance) FROM flights WHERE destination = '{code}'"),
        ("Which airports are in {country}?", "SELECT code FROM airports WHERE country = '{country}'"),
        ("Show the airlines that fly from {city}.",
         "SELECT DISTINCT f.airline FROM flights AS f JOIN airports AS a ON f.origin = a.code WHERE a.city = '{city}'"),
        ("Which flights are longer than {dist} kilometers?", "SELECT id FROM flights WHERE distance > {dist}"),
        ("How many flights does each airline operate?", "SELECT airline, COUNT(*) FROM flights GROUP BY airline"),
        ("What is the longest flight operated by {airline}?",
         "SELECT id FROM flights WHERE airline = '{airline}' ORDER BY distance DESC LIMIT 1"),
        ("List the cities with flights arriving from {code}.",
         "SELECT DISTINCT a.city FROM flights AS f JOIN airports AS a ON f.destination = a.code WHERE f.origin = '{code}'"),
        ("What is the total distance flown by {airline}?", "SELECT SUM(distance) FROM flights WHERE airline = '{airline}'"),
    ],
}  # fmt: skip

# The phrasings the target answers with SQL. Four others were dropped ("SQL for {db}: {q}", "Database
# {db}. Question: {q} Answer with SQL only.", "Please only generate SQL ...", "Could you translate ...
# ({db} database)?"): SmolLM2-135M-Instruct answered most of them with prose or a refusal (greedy:
# 1 of 12 in SQL, against 5 of 5 for these two), so the domain was not text-to-SQL traffic
# (benchmarks/results/general_draft/LOG.md, section 14).
SQL_PROMPTS = [
    "Translate this question into SQL for the {db} database: {q}",
    "Write an SQL query for the {db} database. {q}",
]


def sql_slots(rng: random.Random) -> dict[str, object]:
    major, dept = rng.choice(MAJORS)
    code, city, country = rng.choice(AIRPORTS)
    return {
        "age": rng.randint(19, 28), "city": rng.choice(CITIES), "major": major, "dept": dept,
        "n": rng.randint(2, 5), "gpa": round(rng.uniform(2.5, 3.8), 1), "category": rng.choice(PRODUCTS)[1],
        "price": rng.choice([20, 50, 100, 250, 500]), "name": rng.choice(NAMES), "product": rng.choice(PRODUCTS)[0],
        "qty": rng.randint(2, 8), "airline": rng.choice(AIRLINES), "code": code, "country": country,
        "airport_city": city, "dist": rng.choice([1000, 2000, 3000, 5000]),
    }  # fmt: skip


def sql_databases(seed: int) -> dict[str, sqlite3.Connection]:
    """The seeded databases the SQL answers run against (one per schema)."""
    return {db: build_database(db, random.Random(f"{seed}-{db}")) for db in SCHEMAS}


def sql_example(rng: random.Random, dbs: dict[str, sqlite3.Connection]) -> tuple[str, str, dict]:
    db = rng.choice(sorted(SCHEMAS))
    question, sql = rng.choice(SQL_TEMPLATES[db])
    slots = sql_slots(rng)
    if db == "flights":
        slots["city"] = slots["airport_city"]
    question, sql = question.format(**slots), sql.format(**slots)
    dbs[db].execute(sql).fetchall()  # raises if the template is broken: every kept answer executes
    return rng.choice(SQL_PROMPTS).format(db=db, q=question), sql, {"topic": db}


# ----------------------------------------------------------------------------- math

ITEMS = [
    "apples",
    "pencils",
    "stickers",
    "marbles",
    "cookies",
    "books",
    "cards",
    "shells",
    "eggs",
    "balloons",
]


def math_example(rng: random.Random, _: object = None) -> tuple[str, str, dict]:
    name, other = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    kind = rng.choice(["shopping", "rates", "sharing", "ages", "savings", "geometry"])
    if kind == "shopping":
        n, price, paid = rng.randint(2, 9), rng.randint(2, 15), 0
        total = n * price
        paid = total + rng.randint(1, 20)
        q = f"{name} buys {n} {item} at ${price} each and pays with ${paid}. How much change does {name} get?"
        a = f"The {item} cost {n} * {price} = ${total}. The change is {paid} - {total} = ${paid - total}.\n#### {paid - total}"
    elif kind == "rates":
        speed, hours = rng.randint(3, 12) * 5, rng.randint(2, 6)
        extra = rng.randint(1, 4) * 10
        q = f"A train travels at {speed} km per hour for {hours} hours, then {extra} km more. How far does it travel in total?"
        a = f"In {hours} hours it travels {speed} * {hours} = {speed * hours} km. In total it travels {speed * hours} + {extra} = {speed * hours + extra} km.\n#### {speed * hours + extra}"
    elif kind == "sharing":
        friends = rng.randint(2, 6)
        each = rng.randint(3, 12)
        left = rng.randint(0, friends - 1)
        total = friends * each + left
        q = f"{name} has {total} {item} and shares them equally among {friends} friends. How many {item} does each friend get, and how many are left?"
        a = f"{total} / {friends} = {each} with {left} left over, since {friends} * {each} = {friends * each}. Each friend gets {each} {item} and {left} are left.\n#### {each}"
    elif kind == "ages":
        age, diff, years = rng.randint(6, 20), rng.randint(2, 15), rng.randint(2, 10)
        q = f"{name} is {age} years old and {other} is {diff} years older. How old will {other} be in {years} years?"
        a = f"{other} is {age} + {diff} = {age + diff} years old. In {years} years {other} will be {age + diff} + {years} = {age + diff + years}.\n#### {age + diff + years}"
    elif kind == "savings":
        weekly, weeks, spent = rng.randint(5, 30), rng.randint(3, 12), rng.randint(5, 40)
        saved = weekly * weeks
        q = f"{name} saves ${weekly} every week for {weeks} weeks and then spends ${spent} on {item}. How much money is left?"
        a = f"{name} saves {weekly} * {weeks} = ${saved}. After spending, {saved} - {spent} = ${saved - spent} is left.\n#### {saved - spent}"
    else:
        w, h = rng.randint(2, 20), rng.randint(2, 20)
        q = f"A garden is {w} meters wide and {h} meters long. What is its area and its perimeter?"
        a = f"The area is {w} * {h} = {w * h} square meters. The perimeter is 2 * ({w} + {h}) = {2 * (w + h)} meters.\n#### {w * h}"
    return q, a, {"topic": kind}


# ----------------------------------------------------------------------------- code

CODE_PROMPT = "Please generate code based on the following doc:\n{doc}"


@functools.cache
def stdlib_functions(max_chars: int = 360) -> list[tuple[str, str, str]]:
    """(module, docstring first paragraph, function source without docstring) from the stdlib, sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    pairs = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if any(p in ("test", "tests", "idlelib", "site-packages", "lib2to3") for p in rel.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not ast.get_docstring(node):
                continue
            doc = ast.get_docstring(node).split("\n\n")[0].strip()
            node.body = node.body[1:]  # drop the docstring statement
            if not node.body or len(doc) < 20:
                continue
            source = ast.unparse(node)
            if len(source) <= max_chars and len(doc) <= 240:
                pairs.append((rel.parts[0].removesuffix(".py"), doc, source))
    return sorted(set(pairs))


# ----------------------------------------------------------------------------- finance

GLOSSARY = {
    "a bond": "a loan to a company or government that pays interest and returns the principal at maturity",
    "a stock": "a share of ownership in a company that may pay dividends and changes in price",
    "inflation": "the general rise in prices over time, which lowers the purchasing power of money",
    "a dividend": "a payment a company makes to its shareholders out of its profits",
    "diversification": "spreading money across many assets so that one loss does not hurt the whole portfolio",
    "liquidity": "how quickly an asset can be turned into cash without losing value",
    "an index fund": "a fund that holds the securities of a market index to match its return at low cost",
    "a credit score": "a number that summarizes how likely a borrower is to repay debt",
    "compound interest": "interest earned on both the principal and the interest already added",
    "an emergency fund": "savings kept in cash to cover three to six months of expenses",
    "a mortgage": "a loan used to buy property, secured by the property itself",
    "net worth": "the value of everything you own minus everything you owe",
    "a budget": "a plan that assigns income to spending, saving and paying debt",
    "market capitalization": "the share price times the number of shares outstanding",
    "a recession": "a period in which economic activity falls for several months",
    "an annuity": "a contract that pays a fixed amount at regular intervals",
    "a capital gain": "the profit from selling an asset for more than its purchase price",
    "an expense ratio": "the yearly fee of a fund as a percentage of the money invested",
    "a balance sheet": "a statement of a company's assets, liabilities and equity at one date",
    "cash flow": "the money moving into and out of a business or household over a period",
    "a hedge": "an investment made to reduce the risk of losses in another position",
    "volatility": "how much and how quickly the price of an asset moves up and down",
}
DEFINITION_PROMPTS = [
    "What is {t}?",
    "Explain {t} in simple terms.",
    "Can you define {t}?",
    "What does {t} mean in finance?",
]


def finance_example(rng: random.Random, _: object = None) -> tuple[str, str, dict]:
    kind = rng.choice(
        ["definition", "simple_interest", "compound_interest", "return", "ratio", "loan", "budget"]
    )
    p = rng.choice([500, 1000, 2000, 2500, 5000, 10000, 20000])
    r = rng.choice([2, 3, 4, 5, 6, 8, 10])
    y = rng.randint(1, 10)
    if kind == "definition":
        term = rng.choice(sorted(GLOSSARY))
        q = rng.choice(DEFINITION_PROMPTS).format(t=term)
        a = f"{term[0].upper()}{term[1:]} is {GLOSSARY[term]}."
    elif kind == "simple_interest":
        interest = p * r * y / 100
        q = f"How much simple interest does ${p} earn at {r}% per year over {y} years?"
        a = f"Simple interest = principal * rate * time = {p} * {r / 100} * {y} = ${interest:,.2f}."
    elif kind == "compound_interest":
        value = p * (1 + r / 100) ** y
        q = f"If I invest ${p} at {r}% interest compounded yearly, what is it worth after {y} years?"
        a = f"Future value = {p} * (1 + {r / 100})^{y} = ${value:,.2f}."
    elif kind == "return":
        sell = round(p * rng.uniform(0.7, 1.6))
        pct = (sell - p) / p * 100
        q = f"I bought shares for ${p} and sold them for ${sell}. What was my return?"
        a = f"Return = ({sell} - {p}) / {p} = {pct:.1f}%, a {'gain' if sell >= p else 'loss'} of ${abs(sell - p)}."
    elif kind == "ratio":
        price, eps = rng.randint(10, 300), rng.randint(1, 15)
        q = f"A stock trades at ${price} and its earnings per share are ${eps}. What is its P/E ratio?"
        a = f"P/E ratio = price / earnings per share = {price} / {eps} = {price / eps:.1f}."
    elif kind == "loan":
        months = y * 12
        m = r / 1200
        payment = p * m / (1 - (1 + m) ** -months)
        q = f"What is the monthly payment on a ${p} loan at {r}% a year for {y} years?"
        a = f"With monthly rate {r}/1200 and {months} payments, payment = P * i / (1 - (1 + i)^-n) = ${payment:,.2f}."
    else:
        income = rng.choice([2000, 3000, 4000, 5000, 6000])
        q = f"How should I split a monthly income of ${income} with the 50/30/20 rule?"
        a = f"Needs get 50%: ${income * 0.5:,.0f}. Wants get 30%: ${income * 0.3:,.0f}. Savings get 20%: ${income * 0.2:,.0f}."
    return q, a, {"topic": kind}


# ----------------------------------------------------------------------------- build


def generate_domain(
    domain: str, make: Callable[[random.Random], tuple[str, str, dict]], rng: random.Random, n: int
) -> list[tuple[str, str, dict]]:
    """Up to `n` examples with distinct queries (so eval queries never appear in train)."""
    seen, out = set(), []
    for _ in range(n * 20):
        q, a, groups = make(rng)
        if q not in seen:
            seen.add(q)
            out.append((q, a, groups))
            if len(out) == n:
                break
    return out


def build(seed: int, train_size: int, eval_size: int) -> dict[str, list[dict]]:
    """All splits as `{"{domain}_{split}": records}`. Each domain draws from its own seeded generator,
    so changing one domain's templates leaves the others' records as they were."""
    dbs = sql_databases(seed)
    makers = {
        "sql": lambda r: sql_example(r, dbs),
        "math": math_example,
        "finance": finance_example,
    }
    examples = {
        d: generate_domain(d, make, random.Random(f"{seed}-{d}"), train_size + eval_size)
        for d, make in makers.items()
    }
    code = [
        (CODE_PROMPT.format(doc=doc), src, {"topic": module, "language": "python"})
        for module, doc, src in stdlib_functions()
    ]
    random.Random(f"{seed}-code").shuffle(code)
    examples["code"] = code[: train_size + eval_size]
    out = {}
    for domain in DOMAINS:
        ex = examples[domain]
        splits = {"eval": ex[:eval_size], "train": ex[eval_size:]}
        for split, items in splits.items():
            out[f"{domain}_{split}"] = [
                record(domain, split, i, q, a, **g) for i, (q, a, g) in enumerate(items)
            ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out_dir", default=str(Path(__file__).resolve().parent / "local"))
    parser.add_argument(
        "--train_size",
        type=int,
        default=3000,
        help="train records per domain (code: at most what the stdlib has)",
    )
    parser.add_argument("--eval_size", type=int, default=80, help="eval records per domain")
    args = parser.parse_args()
    for name, records in build(args.seed, args.train_size, args.eval_size).items():
        path = Path(args.out_dir) / f"{name}.json"
        save_conversations(records, path)
        print(f"{path}: {len(records)} records")


if __name__ == "__main__":
    raise SystemExit(run_main(main, "build_local_workload.py"))
