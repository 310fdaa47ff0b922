"""Greets people."""


def greet(name):
    return "Hello " + name
