#!/usr/bin/env python3
"""Writes prompts.txt: a varied training prompt set (chat, code, math, prose, lists/repetition).

Built from small templates crossed with topics so the set is reproducible and reviewable.
Deliberately disjoint from examples/prompts.txt (the evaluation prompts)."""
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
with open("prompts.txt", "w") as f:
    f.write("\n".join(uniq) + "\n")
print(len(uniq), "prompts")
