//! A person's approval, as a state machine: `ask` is given the task token, and the
//! state waits for its use (`POST /callbacks/{token}`, or `SendTaskSuccess`), whose
//! output or error is the state's. Included by path by the tests that run it.

pub const APPROVAL: &str = r#"{
  "StartAt": "Ask",
  "States": {
    "Ask": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {"FunctionName": "ask", "Payload": {"token.$": "$$.Task.Token", "kg.$": "$.kg"}},
            "TimeoutSeconds": 600, "ResultPath": "$.approval", "End": true}
  }
}"#;
