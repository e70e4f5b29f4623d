"""The planner: an instruction and the paths it may touch into an immutable job document,
its secret scan, and the replay of a job whose base moved on. It never applies and never
talks to a generator.
"""
