"""federation"""
