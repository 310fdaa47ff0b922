//! Integration tests of cordon-agent: the providers against scripted HTTP servers on loopback,
//! the loop and the tools with a local fake of the sandbox's tool host.

mod agent_loop;
mod anthropic;
mod example;
mod openai;
mod server;
mod setup;
mod support;
mod tls;
mod tools;
