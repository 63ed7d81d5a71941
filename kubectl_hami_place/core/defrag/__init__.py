"""Automatic, budgeted defragmentation: the policy, the budgets, the triggers and the decision of one run."""
