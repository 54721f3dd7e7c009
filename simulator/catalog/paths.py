"""Where the project's data folders live (the repository root of an editable install)."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
HARDWARE_DIR = PROJECT_ROOT / "hardware_profiles"
EXPERIMENTS_DIR = PROJECT_ROOT / "experiments"
