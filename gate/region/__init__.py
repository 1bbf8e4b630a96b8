"""The region engine: runs one region's step under the guard and judges it."""
