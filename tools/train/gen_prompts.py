#!/usr/bin/env python3
"""Writes prompts.txt: a varied training prompt set (chat, code, math, prose, lists/repetition).

Built from small templates crossed with topics so the set is reproducible and reviewable.
Deliberately disjoint from examples/prompts.txt (the evaluation prompts). The first 299 lines
(v1) are unchanged by the v2 extras appended after them."""
import itertools, random

chat_q = ["What is the capital of {c}?", "Tell me one interesting fact about {c}.",
          "What language is mainly spoken in {c}?", "Describe the weather in {c} in two sentences."]
countries = ["Japan", "Brazil", "Canada", "Egypt", "Norway", "India", "Kenya", "Mexico", "Italy",
             "Australia"]
explain = ["Explain {t} to a beginner.", "What is {t}? Give a short answer.",
           "List three key facts about {t}.", "Why is {t} important?"]
topics = ["photosynthesis", "gravity", "the internet", "machine learning", "a binary search tree",
          "recursion", "the water cycle", "inflation", "vaccines", "the French Revolution",
          "black holes", "a linked list", "TCP/IP", "climate change", "the stock market"]
code = ["Write a {l} function that {f}.", "Show a {l} example that {f}, with a comment per line."]
langs = ["Python", "JavaScript", "C", "Rust", "Go", "Java"]
funcs = ["checks whether a number is prime", "computes the factorial of n",
         "sums the even numbers in a list", "finds the maximum of an array",
         "counts the vowels in a string", "reverses a linked list", "merges two sorted arrays",
         "computes the n-th Fibonacci number", "removes duplicates from a list"]
math = ["What is {a} plus {b}? Show your work.", "What is {a} times {b}? Explain step by step.",
        "A shop sells pens at {a} cents each. How much do {b} pens cost? Think it through.",
        "If a car travels {a} km in {b} hours, what is its average speed?",
        "Solve for x: {a}x + {b} = {c}. Explain each step."]
prose = ["Write a short poem about {s}.", "Write a short story about {s} in five sentences.",
         "Write a friendly message to a friend about {s}.", "Describe {s} in one paragraph.",
         "Write a product description for {s}."]
subjects = ["the ocean", "a rainy morning", "a lost cat", "autumn leaves", "a new bicycle",
            "a mountain hike", "a city at night", "a cup of coffee", "a robot learning to paint"]
lists = ["Count from {a} to {c}, separated by commas.", "List the days of the week in order.",
         "List the months of the year.", "Repeat the word '{w}' five times.",
         "Write the multiplication table of {a} up to 10.", "List the first ten letters of the alphabet.",
         "Copy this sentence three times: {s} is lovely today."]
words = ["hello", "banana", "river", "green", "tomorrow"]

rng = random.Random(7)
out = []
out += [q.format(c=c) for q, c in itertools.product(chat_q, countries)]
out += [q.format(t=t) for q, t in itertools.product(explain, topics)]
out += [q.format(l=l, f=f) for q, l, f in itertools.product(code, langs, funcs)]
for _ in range(30):
    a, b = rng.randint(2, 99), rng.randint(2, 40)
    out.append(rng.choice(math).format(a=a, b=b, c=a * 3 + b))
out += [q.format(s=s) for q, s in itertools.product(prose, subjects)]
for _ in range(20):
    a = rng.randint(1, 12)
    out.append(rng.choice(lists).format(a=a, c=a + rng.randint(10, 30), w=rng.choice(words),
                                        s=rng.choice(subjects).capitalize()))
seen, uniq = set(), []
for p in out:
    if p not in seen:
        seen.add(p); uniq.append(p)
rng.shuffle(uniq)

# --- v2 extras (the MRP head's data): more variety, appended after the v1 set so v1's prompt ids
# (0..298) keep their meaning in data generated from either file.
rng2 = random.Random(15)
extra = []
chat2 = ["How do I {a}? Give me a few tips.", "What is the best way to {a}?",
         "I want to {a}. Where should I start?", "Can you give me a step-by-step plan to {a}?",
         "What are common mistakes people make when they {a}?"]
activities = ["learn to cook", "start running", "save money each month", "learn a new language",
              "sleep better", "prepare for a job interview", "keep a plant alive", "study for exams",
              "write a good resume", "organize my desk", "make new friends in a new city",
              "learn to play the guitar", "reduce stress at work", "plan a birthday party",
              "learn to draw", "train a puppy"]
cities = ["Paris", "Tokyo", "Cairo", "Lima", "Oslo", "Seoul", "Nairobi", "Toronto", "Madrid",
          "Hanoi", "Berlin", "Sydney"]
chat3 = ["Plan a two-day trip to {c}.", "What should a tourist eat in {c}?",
         "Write a short guide to {c} for a first-time visitor."]
compare = ["What is the difference between {x} and {y}?", "Compare {x} and {y} in a short table.",
           "Which is better for a beginner, {x} or {y}? Explain briefly."]
pairs = [("Python", "JavaScript"), ("a list", "a tuple"), ("weather", "climate"),
         ("a virus", "a bacterium"), ("RAM", "a hard disk"), ("TCP", "UDP"),
         ("a stack", "a queue"), ("speed", "velocity"), ("a democracy", "a monarchy"),
         ("tea", "coffee"), ("an atom", "a molecule"), ("SQL", "NoSQL databases"),
         ("renting", "buying a house"), ("cats", "dogs as pets")]
explain2 = ["Explain {t} in simple words.", "Give a short summary of {t}.",
            "Write three quiz questions about {t}, with answers.", "What are the pros and cons of {t}?",
            "Explain {t} using an analogy."]
topics2 = ["electricity", "the immune system", "supply and demand", "plate tectonics", "DNA",
           "the Roman Empire", "solar energy", "compound interest", "the moon's phases",
           "public key cryptography", "operating systems", "the human heart", "volcanoes",
           "neural networks", "the printing press", "rainbows", "hash functions", "evolution",
           "the greenhouse effect", "sorting algorithms", "democracy", "bread baking"]
code2 = ["Write a {l} function that {f}.", "Write {l} code that {f}, and explain how it works.",
         "Fix and improve this idea: a {l} program that {f}.", "Write unit tests in {l} for a function that {f}."]
langs2 = ["Python", "JavaScript", "C", "C++", "Rust", "Go", "Java", "TypeScript", "Bash", "SQL"]
funcs2 = ["parses a date string", "reads a CSV file and prints the number of rows",
          "checks whether a string is a palindrome", "converts Celsius to Fahrenheit",
          "implements binary search", "counts word frequencies in a text",
          "validates an email address", "flattens a nested list", "computes the GCD of two numbers",
          "sorts a list of names alphabetically", "returns the second largest number in a list",
          "implements a simple stack", "converts a number to binary",
          "finds the longest word in a sentence", "rotates an array by k positions"]
code3 = ["Explain what this {l} code does: {c}", "What is the output of this {l} code? {c}"]
snippets = [("Python", "print([x * 2 for x in range(5)])"),
            ("Python", "d = {}; d['a'] = d.get('a', 0) + 1; print(d)"),
            ("JavaScript", "console.log([3, 1, 2].sort().map(x => x + 1));"),
            ("C", "int s = 0; for (int i = 1; i <= 10; i++) s += i; printf(\"%d\", s);"),
            ("Python", "s = 'hello'; print(s[::-1].upper())"),
            ("Go", "for i := 0; i < 3; i++ { fmt.Println(i * i) }")]
math2 = ["What is {a} plus {b}?", "What is {a} minus {b}? Show your work.",
         "What is {a} times {b}?", "What is {p} divided by {b}?",
         "What is {a} percent of {c}? Explain.", "Is {a} a prime number? Explain why.",
         "A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
         "Tom has {a} apples and gives {b} to his friend. How many apples does he have left?",
         "A book costs {a} dollars and is on sale for {b} percent off. What is the sale price?",
         "What is the sum of the numbers from 1 to {a}? Show the formula.",
         "Convert {c} minutes into hours and minutes.", "What is {a} squared?",
         "Solve: {a}x - {b} = {c}. Show each step.",
         "A class has {a} students and {b} of them are absent. What fraction is present?",
         "If {b} workers build a wall in {a} days, how long would {c} workers take? Explain."]
prose2 = ["Write a haiku about {s}.", "Write a limerick about {s}.", "Write a diary entry about {s}.",
          "Write the opening paragraph of a novel about {s}.", "Write a short speech about {s}.",
          "Write a dialogue between two friends about {s}.", "Write a children's story about {s}.",
          "Write a news headline and a short article about {s}.", "Write a review of {s}."]
subjects2 = ["a snowy village", "the first day of school", "a dragon who is afraid of fire",
             "a lighthouse keeper", "a long train journey", "a garden in spring",
             "a small bakery", "a chess tournament", "a summer thunderstorm", "an old library",
             "a space station", "a football match", "a street market", "a friendly ghost",
             "a jazz concert", "the last day of summer"]
lists2 = ["List {n} {k}.", "Give me a numbered list of {n} {k}.", "Name {n} {k}, one per line.",
          "List {n} {k} in alphabetical order."]
kinds = ["fruits", "vegetables", "animals that live in the ocean", "countries in Europe",
         "programming languages", "musical instruments", "colors", "famous scientists",
         "board games", "kitchen tools", "sports played with a ball", "planets",
         "ideas for a rainy day", "healthy breakfast foods", "things to pack for a trip",
         "birds", "rivers", "hobbies"]
lists3 = ["Count backwards from {a} to 1.", "Write the numbers from {a} to {c} in words.",
          "List the even numbers between {a} and {c}.", "Repeat the phrase '{w}' {n} times.",
          "Write the alphabet backwards.", "List the squares of the numbers from 1 to {n}.",
          "Spell the word '{w}' letter by letter.", "Write a shopping list with {n} items.",
          "Make a table of the numbers 1 to {n} and their cubes.",
          "Write a to-do list for {s}.", "Turn this into a bulleted list: {k} and more {k}."]
phrases = ["good morning", "thank you very much", "see you soon", "one two three", "blue sky",
           "happy birthday"]
extra += [q.format(a=a) for q, a in itertools.product(chat2, activities)]
extra += [q.format(c=c) for q, c in itertools.product(chat3, cities)]
extra += [q.format(x=x, y=y) for q, (x, y) in itertools.product(compare, pairs)]
extra += [q.format(t=t) for q, t in itertools.product(explain2, topics2)]
extra += [q.format(l=l, f=f) for q, l, f in itertools.product(code2, langs2, funcs2)
          if rng2.random() < 0.45]
extra += [q.format(l=l, c=c) for q, (l, c) in itertools.product(code3, snippets)]
for _ in range(300):
    a, b = rng2.randint(2, 120), rng2.randint(2, 30)
    extra.append(rng2.choice(math2).format(a=a, b=b, c=a + rng2.randint(5, 200), p=a * b))
extra += [q.format(s=s) for q, s in itertools.product(prose2, subjects2) if rng2.random() < 0.7]
for q, k in itertools.product(lists2, kinds):
    extra.append(q.format(n=rng2.choice([3, 5, 7, 10, 12]), k=k))
for _ in range(80):
    a = rng2.randint(1, 40)
    extra.append(rng2.choice(lists3).format(a=a, c=a + rng2.randint(8, 25), n=rng2.randint(3, 12),
                                            w=rng2.choice(phrases), s=rng2.choice(subjects2),
                                            k=rng2.choice(kinds)))
try:
    with open("../../examples/prompts.txt") as f:
        held_out = set(l.strip() for l in f)
except OSError:
    held_out = set()
extras = []
for p in extra:
    if p not in seen and p not in held_out:
        seen.add(p); extras.append(p)
rng2.shuffle(extras)
assert not (set(uniq) & held_out)
with open("prompts.txt", "w") as f:
    f.write("\n".join(uniq + extras) + "\n")
print(len(uniq), "v1 prompts +", len(extras), "v2 prompts =", len(uniq) + len(extras))
