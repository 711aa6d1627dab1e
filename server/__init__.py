"""maxkernel.server"""
