"""maxkernel.clients"""
