// Shared test helpers live beside this file (golden.h, ...).
