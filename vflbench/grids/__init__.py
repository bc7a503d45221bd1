"""grids"""
