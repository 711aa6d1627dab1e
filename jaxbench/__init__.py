"""maxkernel.jaxbench"""
